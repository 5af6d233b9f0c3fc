// Low-rank adapters (see lora.h).
#include "engine/model/lora.h"

#include <algorithm>
#include <cmath>

#include "engine/core/rng.h"
#include "engine/core/status.h"

namespace zt {

bool lora_targets(const std::string& targets, const std::string& role) {
  for (size_t a = 0; a <= targets.size();) {
    size_t b = targets.find(',', a);
    if (b == std::string::npos) b = targets.size();
    if (targets.compare(a, b - a, role) == 0) return true;
    a = b + 1;
  }
  return false;
}

double lora_block_params(const std::vector<LoraSite>& sites, const RunSpec::Lora& spec) {
  double n = 0;
  for (const LoraSite& s : sites)
    if (lora_targets(spec.targets, s.role)) n += double(spec.rank) * double(s.in + s.out);
  return n;
}

LoraAdapters::LoraAdapters(Backend& be, const TensorParallel& tp, const RunSpec::Lora& spec,
                           const std::vector<std::vector<LoraSite>>& sites, int64_t max_rows)
    : be_(be),
      tp_(tp),
      table_(tp.size(), tp.rank()),
      scale_(float(spec.alpha / double(spec.rank))),
      rank_(int(spec.rank)),
      dropout_(float(spec.dropout)),
      esize_(be.compute_size()),
      max_rows_(max_rows) {
  ZT_CHECK(spec.rank > 0, "LoraAdapters with rank {}", spec.rank);
  const int64_t r = rank_;
  int64_t max_in = 1, max_out = 1, kept = 0, max_parts = 0;
  const int TP = tp.size();
  for (size_t l = 0; l < sites.size(); ++l) {
    sites_.push_back(sites[l]);
    index_.emplace_back();
    parts_of_.emplace_back();
    parts_len_.push_back(0);
    const size_t before = table_.params().size();
    for (const LoraSite& s : sites[l]) {
      parts_of_[l].emplace_back();
      if (!lora_targets(spec.targets, s.role)) {
        index_[l].push_back(-1);
        continue;
      }
      index_[l].push_back(int(table_.params().size()));
      // A: PEFT's kaiming_uniform_(a = sqrt(5)), bound 1 / sqrt(in), or normal(0, 1 / r). Both
      // factors decay, as the Hugging Face trainer's AdamW treats every matrix. Column-parallel:
      // A replicated, B split as the base's rows; row-parallel: A split as the base's columns,
      // B replicated.
      const bool gaussian = spec.init == LoraInit::Gaussian, rows = s.split == TpSplit::Rows;
      table_.add(s.module + ".lora_A.weight", {r, s.in}, rows ? TpSplit::None : TpSplit::Cols, 1, true,
                 gaussian ? 1.0f / float(r) : 0.0f, 0);
      if (!gaussian) table_.set_uniform_init(float(1.0 / std::sqrt(double(s.in))));
      table_.add(s.module + ".lora_B.weight", {s.out, r}, rows ? TpSplit::Rows : TpSplit::None, rows ? s.row_blocks : 1,
                 true, 0, 0, -1, rows ? s.tp_replicas : 1);  // zero: starts as the base
      if (TP > 1) {  // the replicated factor's part: A (column-parallel), B (row-parallel); a B
                     // replicated over tp_replicas ranks sums over them, one slot per piece
        Part& p = parts_of_[l].back();
        p.n = rows ? r * s.in : s.out * r;
        p.off = parts_len_[l];
        parts_len_[l] += p.n;
        if (rows && s.tp_replicas > 1) {  // B's pieces follow A's slot: one per piece (a single one
          const int64_t nb = local_out(s) * r;  // when every rank holds the only key/value head)
          parts_len_[l] += (TP / s.tp_replicas) * nb;
        }
      }
      max_in = std::max(max_in, local_in(s));
      max_out = std::max(max_out, local_out(s));
      ++kept;
    }
    max_parts = std::max(max_parts, parts_len_[l]);
    ZT_CHECK(table_.params().size() > before, "[lora] targets ({}) name no layer of block {}", spec.targets, l);
    table_.end_group("layers." + std::to_string(l));
  }
  auto alloc = [&](int64_t elems) { return be_.alloc(size_t(elems) * esize_, MemTag::Activations); };
  h_buf_ = alloc(kept * max_rows * r);
  int64_t k = 0;
  for (size_t l = 0; l < sites.size(); ++l) {
    h_.emplace_back(sites[l].size(), nullptr);
    for (size_t s = 0; s < sites[l].size(); ++s)
      if (index_[l][s] >= 0) h_[l][s] = el(h_buf_, (k++) * max_rows * r);
  }
  if (max_parts > 0) parts_ = static_cast<float*>(be_.alloc(size_t(max_parts) * sizeof(float), MemTag::Grads));
  tmp_ = alloc(max_rows * max_out);
  dh_ = alloc(max_rows * r);
  dx_ = alloc(max_rows * max_in);
  if (dropout_ > 0) xd_ = alloc(max_rows * max_in);
}

void LoraAdapters::apply_mask(const LoraSite& s, void* out, const void* v, int64_t N) {
  const uint64_t key = name_hash(s.module + ".lora_dropout") ^ (seed_ * 0x9E3779B97F4A7C15ull);
  const int64_t in = local_in(s), col0 = s.split == TpSplit::Cols ? tp_.rank() * in : 0;
  be_.dropout(out, v, N, int(in), in, dropout_, key, first_row_, s.in, col0);
}

const void* LoraAdapters::dropped(const LoraSite& s, const void* x, int64_t N) {
  if (dropout_ <= 0 || !training_) return x;
  apply_mask(s, xd_, x, N);
  return xd_;
}

LoraAdapters::~LoraAdapters() {
  for (void* p : {h_buf_, tmp_, dh_, dx_, xd_, static_cast<void*>(parts_)}) be_.free(p);
}

void LoraAdapters::begin_pass(const std::vector<int>& blocks) {
  ZT_CHECK(prov_ != nullptr, "LoRA adapters without a ParamProvider");
  prov_->begin_pass(blocks);
}

void LoraAdapters::enter(int l, bool backward) {
  entered_ = l;
  params_ = prov_->params(l);
  grads_ = backward ? prov_->grads(l) : nullptr;
  if (backward && parts_) be_.fill_zero(parts_, size_t(parts_len_[size_t(l)]) * sizeof(float));
}

void LoraAdapters::leave(int l, bool backward) {
  if (backward && parts_ && parts_len_[size_t(l)] > 0) {
    // The replicated factors' parts of this block, summed over the tensor group in one
    // all-reduce, then each rank's (its piece's) sum added to the gradient.
    tp_.group().all_reduce_sync(parts_, size_t(parts_len_[size_t(l)]));
    for (size_t s = 0; s < sites_[size_t(l)].size(); ++s) {
      const int ai = a_index(l, int(s));
      if (ai < 0) continue;
      const LoraSite& site = sites_[size_t(l)][s];
      const Part& p = parts_of_[size_t(l)][s];
      const bool rows = site.split == TpSplit::Rows;
      float* g = grads_ + table_.group_rel(size_t(rows ? ai : ai + 1));  // the replicated factor
      be_.add(g, g, parts_ + p.off, p.n);
      if (rows && site.tp_replicas > 1) {  // B held by several ranks: this rank's piece's sum
        const int64_t nb = local_out(site) * rank_;
        float* gb = grads_ + table_.group_rel(size_t(ai) + 1);
        be_.add(gb, gb, parts_ + p.off + p.n + int64_t(tp_.rank() / site.tp_replicas) * nb, nb);
      }
    }
  }
  if (backward) prov_->grads_done(l);
  prov_->release_params(l);
  entered_ = -1;
  params_ = nullptr;
  grads_ = nullptr;
}

void LoraAdapters::forward(int l, int site, const void* x, void* out, int64_t ld_out, int64_t N) {
  const int ai = a_index(l, site);
  if (ai < 0) return;
  ZT_CHECK(entered_ == l && N <= max_rows_, "LoRA forward of block {} (entered {}), {} rows of {}", l, entered_, N,
           max_rows_);
  const LoraSite& s = sites_[size_t(l)][size_t(site)];
  const int64_t in = local_in(s), o = local_out(s);
  const void* A = el(params_, table_.group_rel(size_t(ai)));
  const void* B = el(params_, table_.group_rel(size_t(ai) + 1));
  void* h = h_[size_t(l)][size_t(site)];
  be_.matmul_forward(h, dropped(s, x, N), A, nullptr, int(N), int(in), rank_);  // (N, r); row-parallel: a part
  be_.matmul_forward(tmp_, h, B, nullptr, int(N), rank_, int(o));  // (N, out)
  be_.add_rows_scaled(out, ld_out, tmp_, o, N, int(o), scale_);
}

const void* LoraAdapters::backward(int l, int site, const void* x, const void* dy, int64_t ld_dy, int64_t N) {
  const int ai = a_index(l, site);
  if (ai < 0) return nullptr;
  ZT_CHECK(entered_ == l && grads_ != nullptr, "LoRA backward of block {} (entered {})", l, entered_);
  const LoraSite& s = sites_[size_t(l)][size_t(site)];
  const int64_t in = local_in(s), o = local_out(s);
  const void* A = el(params_, table_.group_rel(size_t(ai)));
  const void* B = el(params_, table_.group_rel(size_t(ai) + 1));
  float* dA = grads_ + table_.group_rel(size_t(ai));
  float* dB = grads_ + table_.group_rel(size_t(ai) + 1);
  if (parts_) {  // tensor-parallel: the replicated factor's gradient is a part (see leave())
    const Part& p = parts_of_[size_t(l)][size_t(site)];
    if (s.split == TpSplit::Rows) {
      dA = parts_ + p.off;
      if (s.tp_replicas > 1) dB = parts_ + p.off + p.n + int64_t(tp_.rank() / s.tp_replicas) * o * rank_;
    } else {
      dB = parts_ + p.off;
    }
  }
  // g = s dy, contiguous (dy may be a column slice of a packed gradient)
  be_.fill_zero(tmp_, size_t(N * o) * esize_);
  be_.add_rows_scaled(tmp_, o, dy, ld_dy, N, int(o), scale_);
  be_.matmul_backward(dh_, dB, nullptr, tmp_, h_[size_t(l)][size_t(site)], B, int(N), rank_, int(o));
  const void* xd = dropped(s, x, N);  // the mask drawn again
  be_.matmul_backward(dx_, dA, nullptr, dh_, xd, A, int(N), int(in), rank_);
  if (xd != x) apply_mask(s, dx_, dx_, N);  // through the dropout: the same mask, the same scale
  return dx_;
}

void LoraAdapters::backward_into(int l, int site, const void* x, const void* dy, int64_t ld_dy, int64_t N, void* dx) {
  const int64_t in = local_in(sites_[size_t(l)][size_t(site)]);
  if (const void* d = backward(l, site, x, dy, ld_dy, N)) be_.add_rows_scaled(dx, in, d, in, N, int(in), 1.0f);
}

}  // namespace zt
