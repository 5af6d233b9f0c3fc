// Clipping and AdamW over state spans (see adamw.h).
#include "engine/optim/adamw.h"

#include <cmath>

namespace zt {

AdamW::AdamW(const RunSpec::Optim& o, Backend& be)
    : o_(o), be_(be), norm_acc_(static_cast<double*>(be.alloc(sizeof(double), MemTag::Other))) {}

AdamW::~AdamW() { be_.free(norm_acc_); }

double AdamW::clip_grad_norm(const std::vector<StateSpan>& spans, Comm& norm_group, double max_norm,
                             double loss_scale) {
  // Accumulated on the device, read once (no synchronization per tensor).
  be_.fill_zero(norm_acc_, sizeof(double));
  for (const StateSpan& s : spans) {
    if (s.all_counted) {  // every tensor counts: the whole span at once
      if (s.n) be_.sum_squares_accumulate(norm_acc_, s.grad, int64_t(s.n));
      continue;
    }
    for (const StateSpan::Piece& p : s.pieces)
      if (p.counted) be_.sum_squares_accumulate(norm_acc_, s.grad + p.off, int64_t(p.n));
  }
  double sq = 0;
  be_.copy_to_host(&sq, norm_acc_, sizeof sq);
  norm_group.all_reduce_doubles(&sq, 1);
  const double norm = std::sqrt(sq) / loss_scale;
  if (!std::isfinite(norm)) return norm;
  double coef = 1.0 / loss_scale;  // unscale and clip in one pass
  if (max_norm > 0 && max_norm / (norm + 1e-6) < 1.0) coef *= max_norm / (norm + 1e-6);
  if (coef != 1.0)
    for (const StateSpan& s : spans)
      if (s.n) be_.scale(s.grad, float(coef), int64_t(s.n));
  return norm;
}

void AdamW::step(const std::vector<StateSpan>& spans, double lr, int t) {
  const size_t cs = be_.compute_size();
  for (const StateSpan& s : spans)
    for (const StateSpan::Piece& p : s.pieces)
      be_.adamw_update(s.master + p.off, s.grad + p.off, s.m + p.off, s.v + p.off,
                       s.compute ? static_cast<char*>(s.compute) + p.off * cs : nullptr, int64_t(p.n), float(lr),
                       float(o_.beta1), float(o_.beta2), float(o_.eps), p.decay ? float(o_.weight_decay) : 0.0f, t);
}

}  // namespace zt
