// The resume check's probe (see resume_probe.h).
#include "engine/train/resume_probe.h"

#include <algorithm>
#include <cmath>

#include "engine/core/log.h"
#include "engine/core/status.h"

namespace zt {

namespace {
constexpr int64_t kProbeRows = 4;
}  // namespace

ResumeProbe capture_probe(Model& model, Comm& world, bool root, const int32_t* inputs, const int32_t* targets, int B,
                          int T, DType compute, const std::string& computed_on) {
  ResumeProbe p;
  p.rows = std::min<int64_t>(kProbeRows, B), p.seq_len = T, p.compute = dtype_name(compute), p.computed_on = computed_on;
  const size_t n = size_t(p.rows) * size_t(T);
  // rank 0's rows to every rank: the others add zeros (token ids are exact in a double)
  std::vector<double> ids(2 * n, 0.0);
  if (root)
    for (size_t i = 0; i < n; ++i) ids[i] = inputs[i], ids[n + i] = targets[i];
  world.all_reduce_doubles(ids.data(), ids.size());
  p.inputs.resize(n), p.targets.resize(n);
  for (size_t i = 0; i < n; ++i) p.inputs[i] = int32_t(ids[i]), p.targets[i] = int32_t(ids[n + i]);
  p.loss = probe_loss(model, p);
  return p;
}

double probe_loss(Model& model, const ResumeProbe& probe) {
  double sum = 0;
  const int T = int(probe.seq_len);
  for (int64_t r = 0; r < probe.rows; ++r)
    sum += model.forward(probe.inputs.data() + r * T, probe.targets.data() + r * T, 1, T, 0.0f);
  return sum / double(probe.rows);
}

double probe_tolerance(const ResumeProbe& probe, const std::string& computed_on, DType compute, bool deterministic) {
  // Another layout sums in another order. Measured on the CPU backend, 4 data-parallel ranks
  // against tensor 2: 2e-5 relative in bf16; fp32 moves far less. The bounds leave a margin of
  // 100x or more (a GPU's kernels round differently from the CPU's). Either run in 16 bits: the
  // 16-bit bound (a bf16 checkpoint resumed in fp32 moves the loss by about 1e-3).
  const bool fp32 = compute == DType::F32 && (probe.compute.empty() || probe.compute == "fp32");
  if (!fp32) return 5e-3;
  if (probe.computed_on != computed_on) return 1e-4;
  return deterministic ? 0.0 : 1e-6;  // same layout; NCCL may pick another algorithm on other nodes
}

void check_resume_probe(Model& model, int seq_len, const ResumeProbe& probe, const std::string& computed_on,
                        DType compute, bool deterministic, const std::string& checkpoint, bool unchecked, bool root) {
  if (probe.rows == 0) {
    if (root) spdlog::info("checkpoint: {} holds no probe batch (written before resume checks): not checked", checkpoint);
    return;
  }
  if (probe.seq_len > seq_len) {
    if (root)
      spdlog::warn("checkpoint: the probe's sequences ({} tokens) are longer than [model] seq_len = {}: not checked",
                   probe.seq_len, seq_len);
    return;
  }
  const double loss = probe_loss(model, probe);
  const double tol = probe_tolerance(probe, computed_on, compute, deterministic);
  const double diff = std::abs(loss - probe.loss);
  const bool ok = tol == 0 ? loss == probe.loss : diff <= tol * std::max(1.0, std::abs(probe.loss));
  const std::string bound = tol == 0 ? "bit-equal: same backend, precision and layout"
                                     : fmt::format("relative tolerance {:g} ({} compute now, {} then, {})", tol,
                                                   dtype_name(compute), probe.compute.empty() ? "?" : probe.compute,
                                                   probe.computed_on == computed_on ? "same layout" : "another layout");
  if (ok) {
    if (root)
      spdlog::info("checkpoint: resume check passed: the probe batch's loss {:.9g} matches the saved {:.9g} ({})", loss,
                   probe.loss, bound);
    return;
  }
  const std::string what = fmt::format(
      "{}: resume check failed: the probe batch ({} sequences saved with the checkpoint) has loss {:.9g} with the "
      "weights as loaded here ({}) but {:.9g} when it was saved ({}); expected {}. The weights were not restored as "
      "saved: a file altered or mixed up with another's, or a resharding bug",
      checkpoint, probe.rows, loss, computed_on, probe.loss, probe.computed_on, bound);
  if (!unchecked) user_error("{}; --resume-unchecked resumes anyway (for debugging)", what);
  if (root) spdlog::warn("{}; resuming anyway (--resume-unchecked)", what);
}

}  // namespace zt
