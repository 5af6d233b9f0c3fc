// The memory report (see memory_report.h).
#include "engine/train/memory_report.h"

#include "engine/core/log.h"

namespace zt {

nlohmann::json memory_record(const Backend& be, const ParamStore& store, int rank, int64_t step) {
  const MemoryStats st = be.memory_stats();
  nlohmann::json device = {{"allocated", st.allocated}, {"peak", st.peak}, {"reserved", st.reserved}};
  for (size_t t = 0; t < size_t(MemTag::kCount); ++t) device[mem_tag_name(MemTag(t))] = st.by_tag[t];
  nlohmann::json rec = {{"kind", "memory"}, {"step", step}, {"rank", rank}, {"device", device},
                        {"pinned_host_total", st.pinned_host}};
  if (store.offloads_optimizer()) {
    const ParamStore::TierBytes t = store.tier_bytes();
    const char* kinds[3] = {"params", "grads", "optimizer"};
    nlohmann::json pinned, nvme;
    for (int k = 0; k < 3; ++k) pinned[kinds[k]] = t.pinned[k], nvme[kinds[k]] = t.nvme[k];
    rec["pinned_host"] = pinned;
    rec["nvme"] = nvme;
  }
  return rec;
}

void log_memory(const Backend& be, const ParamStore& store, const Topology& topo, const RunSpec& spec) {
  const MemoryStats s = be.memory_stats();
  auto mib = [&](MemTag t) { return s.by_tag[size_t(t)] / 1048576.0; };
  spdlog::info("rank {} memory: params {:.3f} MiB, grads {:.3f} MiB, optimizer {:.3f} MiB, "
               "activations {:.3f} MiB (tensor-parallel {}, ZeRO-{} over {} data-parallel ranks{})",
               topo.world_rank, mib(MemTag::Params), mib(MemTag::Grads), mib(MemTag::OptimStates),
               mib(MemTag::Activations), topo.tp, spec.parallel.zero_stage, topo.shard_size(),
               topo.replicas > 1 ? fmt::format(", in each of {} replicas", topo.replicas) : "");
  if (!store.offloads_optimizer()) return;
  const ParamStore::TierBytes t = store.tier_bytes();  // the other tiers, per kind of state
  auto m = [](double b) { return b / 1048576.0; };
  spdlog::info("rank {} offloaded: pinned host: params {:.3f} MiB (fp32 masters{}, compute copy), grads {:.3f} "
               "MiB, optimizer {:.3f} MiB; nvme: params {:.3f} MiB, optimizer {:.3f} MiB ({}); pinned total "
               "held {:.3f} MiB", topo.world_rank, m(t.pinned[0]), t.nvme[0] > 0 ? " on nvme" : "", m(t.pinned[1]),
               m(t.pinned[2]), m(t.nvme[0]), m(t.nvme[2]),
               spec.offload.nvme_path.empty() ? "no nvme_path" : spec.offload.nvme_path, m(double(s.pinned_host)));
}

}  // namespace zt
