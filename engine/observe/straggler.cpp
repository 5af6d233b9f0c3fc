// The straggler verdict (see straggler.h).
#include "engine/observe/straggler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/core/log.h"

namespace zt {

namespace {

constexpr int kFields = 6;  // the 5 phases and the step count

double median_of(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
  return v[v.size() / 2];
}

nlohmann::json phases_json(const RankPhases& p) {
  auto r2 = [](double x) { return std::round(x * 100) / 100; };
  return {{"busy_ms", r2(p.busy())}, {"compute_ms", r2(p.compute)}, {"data_ms", r2(p.data)},
          {"offload_ms", r2(p.offload)}, {"host_ms", r2(p.host)}, {"comm_ms", r2(p.comm)}};
}

}  // namespace

Verdict judge_stragglers(const std::vector<RankPhases>& ranks, const std::vector<std::string>& hosts,
                         double threshold, int64_t step, nlohmann::json* row) {
  const size_t n = ranks.size();
  if (n < 2) return {};
  std::vector<double> busy;
  for (const RankPhases& p : ranks) busy.push_back(p.busy());
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return busy[a] > busy[b]; });
  // The busiest rank against the median of the others (with 2 ranks: the other one), phase by
  // phase too.
  auto median_by = [&](auto value) {
    std::vector<double> v;
    for (size_t i = 1; i < n; ++i) v.push_back(value(ranks[order[i]]));
    return median_of(v);
  };
  const RankPhases med{median_by([](const RankPhases& p) { return p.compute; }),
                       median_by([](const RankPhases& p) { return p.data; }),
                       median_by([](const RankPhases& p) { return p.offload; }),
                       median_by([](const RankPhases& p) { return p.host; }),
                       median_by([](const RankPhases& p) { return p.comm; })};
  const double med_busy = median_by([](const RankPhases& p) { return p.busy(); });
  auto host = [&](size_t r) { return r < hosts.size() ? hosts[r] : std::string("?"); };
  if (row) {
    nlohmann::json slowest = nlohmann::json::array();
    for (size_t i = 0; i < std::min<size_t>(3, n); ++i) {
      nlohmann::json e = phases_json(ranks[order[i]]);
      e["rank"] = order[i], e["host"] = host(order[i]);
      slowest.push_back(e);
    }
    nlohmann::json m = phases_json(med);
    m["busy_ms"] = std::round(med_busy * 100) / 100;  // not the phases' sum: a median of its own
    *row = {{"kind", "ranks"}, {"step", step}, {"ranks", n}, {"median_of_others", m}, {"slowest", slowest}};
  }
  // The slowest rank stands out when it is busy more than threshold above the median rank, by at
  // least 1 ms a step (a tiny step's jitter is not a straggler).
  const size_t s = order[0];
  const RankPhases& p = ranks[s];
  const double excess = p.busy() - med_busy;
  if (!(p.busy() > (1 + threshold) * med_busy && excess >= 1.0)) return {};
  // The phase that makes most of the excess names the cause.
  struct Part {
    const char* what;
    double over;
    const char* knob;
  };
  const Part parts[] = {
      {"compute", p.compute - med.compute,
       "look at that device: clocks held down (nvidia-smi -q -d PERFORMANCE: power or thermal slowdown), another "
       "process on it, or on the CPU backend another process on its cores (a noisy neighbour); replace the node if "
       "it stays slow"},
      {"waiting for data", p.data - med.data,
       "look at that host's disk or network: its [data] cache_dir on a local SSD, its download rate "
       "(ztrain-bench-data)"},
      {"offload transfers and NVMe I/O", p.offload - med.offload,
       "look at that host's PCIe link and its [offload] nvme_path disk"},
      {"host time outside the measured phases", p.host - med.host,
       "look for another process on that host's CPUs (a noisy neighbour), or a slow checkpoint disk there"},
  };
  const Part& why = *std::max_element(std::begin(parts), std::end(parts),
                                      [](const Part& a, const Part& b) { return a.over < b.over; });
  Verdict v;
  v.kind = "straggler";
  v.evidence = fmt::format(
      "rank {} (host {}) is busy {:.1f} ms per step, {:.0f}% above the other ranks' median {:.1f} ms, most of it in {} "
      "({:+.1f} ms); the other ranks wait for it (median exposed communication {:.1f} ms per step, its own {:.1f})",
      s, host(s), p.busy(), 100 * excess / std::max(med_busy, 1e-9), med_busy, why.what, why.over, med.comm, p.comm);
  v.knob = why.knob;
  v.subject = fmt::format("rank {}", s);
  return v;
}

void StragglerWatch::add(const StepResult& r) {
  sum_.compute += r.forward_ms + r.backward_ms + r.optimizer_ms;
  sum_.data += r.data_wait_ms;
  sum_.offload += r.offload_ms;
  sum_.host += r.checkpoint_ms + r.other_ms;
  sum_.comm += r.comm_ms;
  ++steps_;
}

Verdict StragglerWatch::exchange(int64_t step, nlohmann::json* row) {
  const int n = world_.size(), me = world_.rank();
  std::vector<double> all(size_t(n) * kFields, 0.0);  // (rank, field): each rank fills its row, the sum gathers
  double* mine = &all[size_t(me) * kFields];
  mine[0] = sum_.compute, mine[1] = sum_.data, mine[2] = sum_.offload, mine[3] = sum_.host, mine[4] = sum_.comm;
  mine[5] = double(steps_);
  world_.all_reduce_doubles(all.data(), all.size());
  sum_ = {}, steps_ = 0;
  if (me != 0) return {};
  std::vector<RankPhases> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const double* x = &all[size_t(r) * kFields];
    const double k = std::max(1.0, x[5]);
    ranks[size_t(r)] = {x[0] / k, x[1] / k, x[2] / k, x[3] / k, x[4] / k};
  }
  return judge_stragglers(ranks, hosts_, threshold_, step, row);
}

}  // namespace zt
