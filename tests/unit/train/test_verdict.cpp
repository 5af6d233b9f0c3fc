// The bottleneck verdict's thresholds (engine/train/verdict.h), including throttling, which needs a
// GPU's telemetry and so cannot be provoked on the CPU backend (tests/observability/verdicts.py
// provokes the others in real runs).
#include <catch2/catch.hpp>

#include "engine/train/verdict.h"

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
  MemoryStats m;
  m.peak = m.allocated = m.reserved = 95;
  REQUIRE(judge(parts(0, 0, 0), m, 100, spec).kind == "memory pressure");
  m.reserved = 200;  // half of what is held is unused: fragmentation
  m.peak = 50;
  REQUIRE(judge(parts(0, 0, 0), m, 0, spec).kind == "memory pressure");
  const Verdict t = judge(parts(0, 0, 0), none, 0, spec, {"gpu_idle", "hw_thermal"});
  REQUIRE(t.kind == "throttling");
  REQUIRE(t.evidence.find("hw_thermal") != std::string::npos);
  REQUIRE(t.evidence.find("gpu_idle") == std::string::npos);
  REQUIRE(judge(parts(0, 0, 0), none, 0, spec, {"gpu_idle", "applications_clocks"}).kind.empty());
  REQUIRE(!judge(parts(50, 0, 0), none, 0, spec).line().empty());
}
