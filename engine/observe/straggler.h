// The straggler verdict. Every log interval the ranks exchange their phase times, summed over the
// interval (one all-reduce of 6 doubles per rank), and rank 0 names the rank the others waited
// for: the one whose busy time (the step minus its exposed communication: compute, data, offload,
// checkpoint and host time) is more than [run] straggler_threshold above the median rank's. A
// slow rank's excess shows as the others' communication wait, so "the slowest compute" and "the
// one the others keep waiting for" are one rule here. The phase that makes the excess picks the
// knob: compute (clocks held down, a noisy neighbour on the device or cores), data (its disk or
// network), offload (its PCIe link or NVMe), host (another process on its CPUs).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/comm/comm.h"
#include "engine/observe/step_result.h"
#include "engine/observe/verdict.h"

namespace zt {

// One rank's phases over an interval, in ms per step.
struct RankPhases {
  double compute = 0, data = 0, offload = 0, host = 0, comm = 0;  // host: checkpoint stall + other
  double busy() const { return compute + data + offload + host; }
};

// Rank 0's judgement of every rank's phases. `hosts[r]`: rank r's host name.
// `row`: a metrics row of kind "ranks" (the other ranks' median phases and the slowest three).
Verdict judge_stragglers(const std::vector<RankPhases>& ranks, const std::vector<std::string>& hosts,
                         double threshold, int64_t step, nlohmann::json* row);

class StragglerWatch {
 public:
  StragglerWatch(Comm& world, std::vector<std::string> hosts, double threshold)
      : world_(world), hosts_(std::move(hosts)), threshold_(threshold) {}
  void add(const StepResult& r);  // every step, every rank
  // Collective (every rank, at the same steps): the interval's phases gathered; rank 0 gets the
  // verdict (empty when no rank stands out, and on the other ranks) and the metrics row.
  Verdict exchange(int64_t step, nlohmann::json* row);

 private:
  Comm& world_;
  std::vector<std::string> hosts_;
  double threshold_;
  RankPhases sum_;
  int64_t steps_ = 0;
};

}  // namespace zt
