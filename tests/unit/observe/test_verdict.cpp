// The bottleneck verdict's thresholds (engine/observe/verdict.h), including throttling, which needs a
// GPU's telemetry and so cannot be provoked on the CPU backend (tests/observability/verdicts.py
// provokes the others in real runs).
#include <catch2/catch.hpp>

#include "engine/observe/straggler.h"
#include "engine/observe/verdict.h"

using namespace zt;

namespace {
StepResult parts(double data, double comm, double other) {
  StepResult r;
  r.step_ms = 100;
  r.data_wait_ms = data, r.comm_ms = comm, r.other_ms = other;
  r.forward_ms = r.backward_ms = (100 - data - comm - other) / 2;
  return r;
}
}  // namespace

TEST_CASE("verdicts: thresholds, the largest excess first, throttling from NVML reasons", "[verdict]") {
  const RunSpec spec;
  const MemoryStats none;
  REQUIRE(judge(parts(4, 14, 19), none, 0, spec).kind.empty());  // each just under its threshold
  REQUIRE(judge(parts(6, 0, 0), none, 0, spec).kind == "data-bound");
  REQUIRE(judge(parts(0, 16, 0), none, 0, spec).kind == "communication-bound");
  REQUIRE(judge(parts(0, 0, 21), none, 0, spec).kind == "host-bound");
  REQUIRE(judge(parts(6, 40, 0), none, 0, spec).kind == "communication-bound");  // 40/15 > 6/5
  StepResult off = parts(0, 0, 0);
  off.offload_ms = 14;
  REQUIRE(judge(off, none, 0, spec).kind.empty());
  off.offload_ms = 30, off.forward_ms -= 16;
  REQUIRE(judge(off, none, 0, spec).kind == "offload-bound");
  REQUIRE(judge(off, none, 0, spec).knob.find("io_depth") != std::string::npos);
  MemoryStats m;
  m.peak = m.allocated = m.reserved = 95;
  REQUIRE(judge(parts(0, 0, 0), m, 100, spec).kind == "memory pressure");
  m.reserved = 200;  // half of what is held is unused: fragmentation
  m.peak = 50;
  REQUIRE(judge(parts(0, 0, 0), m, 0, spec).kind == "memory pressure");
  DeviceSignals hot;
  hot.throttle_reasons = {"gpu_idle", "hw_thermal"};
  const Verdict t = judge(parts(0, 0, 0), none, 0, spec, hot);
  REQUIRE(t.kind == "throttling");
  REQUIRE(t.evidence.find("hw_thermal") != std::string::npos);
  REQUIRE(t.evidence.find("gpu_idle") == std::string::npos);
  DeviceSignals idle;
  idle.throttle_reasons = {"gpu_idle", "applications_clocks"};
  REQUIRE(judge(parts(0, 0, 0), none, 0, spec, idle).kind.empty());
  REQUIRE(!judge(parts(50, 0, 0), none, 0, spec).line().empty());
}

TEST_CASE("verdicts: host-bound from NVML GPM SM activity when no wait explains idle SMs", "[verdict]") {
  const RunSpec spec;
  const MemoryStats none;
  DeviceSignals gpm;
  gpm.sm_active = 0.45, gpm.tensor_active = 0.20;
  const Verdict v = judge(parts(1, 5, 5), none, 0, spec, gpm, 0.12);
  REQUIRE(v.kind == "host-bound");
  REQUIRE(v.evidence.find("busy 45%") != std::string::npos);
  REQUIRE(v.evidence.find("MFU 12%") != std::string::npos);
  gpm.sm_active = 0.75;  // busy enough
  REQUIRE(judge(parts(1, 5, 5), none, 0, spec, gpm).kind.empty());
  gpm.sm_active = 0.45;  // idle SMs explained by a data wait: data-bound, not host-bound
  REQUIRE(judge(parts(8, 5, 5), none, 0, spec, gpm).kind == "data-bound");
  gpm.sm_active = -1;  // no GPM (before Hopper, the CPU backend): only the breakdown judges
  REQUIRE(judge(parts(1, 5, 5), none, 0, spec, gpm).kind.empty());
}

TEST_CASE("straggler verdict: the busiest rank over the median, the phase that makes it, no jitter", "[verdict]") {
  // 4 ranks: 10 ms of compute each, 30 ms waiting in communication for the slow one
  std::vector<RankPhases> ranks(4, RankPhases{10, 1, 0, 0.5, 30});
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  nlohmann::json row;
  REQUIRE(judge_stragglers(ranks, hosts, 0.2, 10, &row).kind.empty());  // all alike
  REQUIRE(row["median_of_others"]["busy_ms"] == 11.5);
  ranks[2].compute = 40, ranks[2].comm = 1;
  Verdict v = judge_stragglers(ranks, hosts, 0.2, 10, &row);
  REQUIRE(v.kind == "straggler");
  REQUIRE(v.subject == "rank 2");
  REQUIRE(v.evidence.find("rank 2 (host b)") != std::string::npos);
  REQUIRE(v.evidence.find("compute") != std::string::npos);
  REQUIRE(row["slowest"][0]["rank"] == 2);
  ranks[2] = ranks[0], ranks[3].data = 31;  // slow data on rank 3: its disk, not its clocks
  v = judge_stragglers(ranks, hosts, 0.2, 10, nullptr);
  REQUIRE(v.subject == "rank 3");
  REQUIRE(v.knob.find("disk or network") != std::string::npos);
  // under the threshold, or over it by less than 1 ms a step: not a straggler
  ranks[3].data = 1 + 0.19 * 11.5;
  REQUIRE(judge_stragglers(ranks, hosts, 0.2, 10, nullptr).kind.empty());
  std::vector<RankPhases> tiny(4, RankPhases{0.5, 0, 0, 0, 1});
  tiny[1].compute = 1.4;  // 180% above, but 0.9 ms
  REQUIRE(judge_stragglers(tiny, hosts, 0.2, 10, nullptr).kind.empty());
  REQUIRE(judge_stragglers({RankPhases{}}, {"a"}, 0.2, 10, nullptr).kind.empty());  // one rank
  // two ranks: the slow one against the other
  const Verdict two = judge_stragglers({RankPhases{10, 0, 0, 0, 30}, RankPhases{40, 0, 0, 0, 1}}, {"a", "b"}, 0.2, 10,
                                       nullptr);
  REQUIRE(two.subject == "rank 1");
}
