// The ring model of a collective's time (see collective_cost.h).
#include "engine/plan/collective_cost.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace zt {

const char* collective_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::AllReduce: return "all-reduce";
    case CollectiveKind::ReduceScatter: return "reduce-scatter";
    case CollectiveKind::AllGather: return "all-gather";
    case CollectiveKind::Broadcast: return "broadcast";
  }
  return "?";
}

double bus_factor(CollectiveKind kind, int n) {
  if (n <= 1) return 0;
  switch (kind) {
    case CollectiveKind::AllReduce: return 2.0 * (n - 1) / n;
    case CollectiveKind::ReduceScatter:
    case CollectiveKind::AllGather: return double(n - 1) / n;
    case CollectiveKind::Broadcast: return 1;
  }
  return 0;
}

int collective_steps(CollectiveKind kind, int n) {
  if (n <= 1) return 0;
  const int twice = kind == CollectiveKind::AllReduce ? 2 : 1;
  return twice * std::min(n - 1, int(std::ceil(std::log2(double(n)))));
}

double link_bus_bandwidth(const Link& link, CollectiveKind kind) {
  const double own = kind == CollectiveKind::ReduceScatter ? link.reduce_scatter_bytes_per_s
                     : kind == CollectiveKind::AllGather   ? link.all_gather_bytes_per_s
                                                           : 0;
  return own > 0 ? own : link.bytes_per_s;
}

double collective_seconds(CollectiveKind kind, double bytes, int n, const Link& link) {
  if (n <= 1) return 0;
  return collective_steps(kind, n) * link.step_latency_s + bytes * bus_factor(kind, n) / link_bus_bandwidth(link, kind);
}

Link group_link(int size, int stride, const MachineProfile& m, int world) {
  const int per_machine = std::max(1, m.gpus_per_machine);
  const int64_t span = int64_t(size) * stride;
  if (size <= 1 || (span <= per_machine && (std::max<int64_t>(world, span) <= per_machine || per_machine % span == 0)))
    return m.intra;
  const int members = std::max(1, std::min(size, per_machine / std::min(std::max(1, stride), per_machine)));
  Link l = m.network;
  l.bytes_per_s = std::min(m.intra.bytes_per_s, members * m.network.bytes_per_s);
  for (const auto kind : {CollectiveKind::ReduceScatter, CollectiveKind::AllGather}) {
    double& own = kind == CollectiveKind::ReduceScatter ? l.reduce_scatter_bytes_per_s : l.all_gather_bytes_per_s;
    own = std::min(link_bus_bandwidth(m.intra, kind), members * link_bus_bandwidth(m.network, kind));
  }
  l.step_latency_s = std::max(m.intra.step_latency_s, m.network.step_latency_s);
  if (members > 1) l.name = fmt::format("{}, {} GPUs a machine", m.network.name, members);
  return l;
}

}  // namespace zt
