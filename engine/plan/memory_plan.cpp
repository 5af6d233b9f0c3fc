// plan_memory and check_memory_fits (see memory_plan.h).
#include "engine/plan/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/core/status.h"
#include "engine/model/registry.h"

namespace zt {

MemoryPlan plan_memory(const RunSpec& spec, int tp, int dp, size_t compute_size) {
  const ModelFootprint f = model_footprint(spec.model, int(spec.train.micro_batch), tp, compute_size,
                                           recompute_of(spec.train.recompute));
  const int stage = int(spec.parallel.zero_stage);
  const bool mixed = compute_size < 4;
  const double P = f.params, D = stage == 0 ? 1.0 : double(dp), fp32 = 4;
  // ParamStore: the masters are sharded at ZeRO-3, and at ZeRO >= 1 in mixed precision (the
  // compute copy is what the model reads); gradients are full below ZeRO-2 (plus the shard at
  // ZeRO-1), moments sharded from ZeRO-1; the compute copy is full below ZeRO-3.
  const bool sharded_masters = stage == 3 || (mixed && stage >= 1);
  MemoryPlan m;
  m.activations = f.activation_bytes;
  const std::string& opt = spec.offload.optimizer;
  if (opt != "none") {  // ParamStore with offload: masters, moments and the optimizer's gradient off the device
    const double S = stage == 0 ? P : P / D, copy = stage == 3 ? P / D : P;  // S: each state array's elements
    const bool params_off = spec.offload.params != "none";
    m.params = params_off ? 0 : copy * double(compute_size);
    m.grads = (stage <= 1 ? P * fp32 : 0) + (stage == 1 ? P / D * fp32 : 0);
    const bool params_nvme = spec.offload.params == "nvme";
    m.pinned_host = S * fp32 /* gradient */ + (params_nvme ? 0 : S * double(compute_size)) /* compute copy */ +
                    (opt == "cpu" ? 3 * S * fp32 : 0);
    m.nvme = (opt == "nvme" ? 3 * S * fp32 : 0) + (params_nvme ? S * double(compute_size) : 0);
    if (params_nvme) {  // ParamStore's read-ahead ring: prefetch + 2 buffers of the largest group's shard
      // (the larger of the embedding and an average layer: a bound for the start-up checks)
      const double largest = std::max(double(spec.model.vocab_size) * double(spec.model.d_model) / tp,
                                      P / double(std::max<int64_t>(1, spec.model.n_layer)));
      m.pinned_host += double(spec.parallel.prefetch + 2) * (largest / D * double(compute_size) + 3 * 4096);
    }
    if (opt == "nvme") {  // ParamStore::alloc_stream_sets: block sets, each buffer aligned within 4 KiB more
      const double rounded = std::max(2048.0, std::ceil(S / 2048) * 2048);
      const double chunk = std::min(std::max(2048.0, std::floor(spec.offload.buffer_mb * 1048576.0 / fp32 / 2048) * 2048),
                                    rounded);  // elements per block
      const double sets = std::max(1.0, std::min(double(spec.offload.io_depth), std::ceil(S / chunk)));
      m.pinned_host += sets * (3 * (chunk * fp32 + 4096) + (params_nvme ? chunk * double(compute_size) + 4096 : 0));
    }
    return m;
  }
  m.params = (sharded_masters ? P / D : P) * fp32 + (mixed ? (stage == 3 ? P / D : P) * double(compute_size) : 0);
  m.grads = (stage <= 1 ? P * fp32 : 0) + (stage >= 1 ? P / D * fp32 : 0);
  m.optimizer = 2 * P / D * fp32;
  return m;
}

std::string offload_hint(const RunSpec& spec, int tp, int dp, size_t compute_size, double available) {
  if (spec.offload.params != "none") return "";
  const auto gib = [](double b) { return b / 1073741824.0; };
  RunSpec s = spec;
  if (spec.offload.optimizer == "none") {
    s.offload.optimizer = "cpu";
    const MemoryPlan p = plan_memory(s, tp, dp, compute_size);
    if (p.total() <= available)
      return fmt::format("; [offload] optimizer = \"cpu\" would need {:.3g} GiB of device memory per rank "
                         "({:.3g} GiB pinned host)", gib(p.total()), gib(p.pinned_host));
  }
  s.parallel.zero_stage = 3;
  s.offload.optimizer = spec.offload.optimizer == "none" ? "cpu" : spec.offload.optimizer;
  s.offload.params = "cpu";
  const MemoryPlan p = plan_memory(s, tp, dp, compute_size);
  if (p.total() <= available)
    return fmt::format("; [parallel] zero_stage = 3 with [offload] optimizer = \"{}\" and params = \"cpu\" would "
                       "need {:.3g} GiB of device memory per rank (plus the gathered layers)",
                       s.offload.optimizer, gib(p.total()));
  return "";
}

void check_memory_fits(const MemoryPlan& plan, size_t available, int ranks_sharing, const std::string& where,
                       const std::string& source, const std::string& hint) {
  if (available == SIZE_MAX) return;
  const double need = plan.total() * double(ranks_sharing);
  if (need <= double(available)) return;
  const auto gib = [](double b) { return b / 1073741824.0; };
  user_error("{}: this spec needs at least {:.3g} GiB per rank (parameters {:.3g}, gradients {:.3g}, optimizer "
             "{:.3g}, activations {:.3g} GiB){} but {} has {:.3g} GiB available ({:.0f} bytes needed, {} available): "
             "use a smaller model or micro_batch, more ranks with ZeRO or tensor parallelism, or offload{}",
             source, gib(plan.total()), gib(plan.params), gib(plan.grads), gib(plan.optimizer), gib(plan.activations),
             ranks_sharing > 1 ? fmt::format(" x {} ranks on this machine", ranks_sharing) : "", where,
             gib(double(available)), need, available, hint);
}

}  // namespace zt
