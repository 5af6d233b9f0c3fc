// Where a step's time went (StepResult's step_ms and its parts) and, for [run] trace_steps, the
// step's timeline: a StepHook (step_hooks.h) that takes timing points around the phases and
// points in the communicators' waits at the same boundaries (device time and device-measured
// stalls on a GPU, both read after the step's synchronize), and the host's blocked time in
// offload transfers. Also the profiler's ranges (NVTX on a GPU) around the phases.
#pragma once
#include <chrono>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"
#include "engine/observe/step_hooks.h"
#include "engine/observe/trace.h"
#include "engine/offload/offload_clock.h"

namespace zt {

class StepBreakdown final : public StepHook {
 public:
  // `groups`: the job's communicators (world, tensor, data); `trace`: null when no step is traced.
  StepBreakdown(Backend& be, std::vector<Comm*> groups, OffloadClock& offload, StepTrace* trace);
  // Takes back the observers a traced step installed, when it ended early (threw): the groups and
  // the clock outlive the breakdown and would call into it.
  ~StepBreakdown() override;
  // A wait for a micro-batch's data that lasted from `start` to `end`, `blocked_ms` of it blocked.
  void data_wait(std::chrono::steady_clock::time_point start, std::chrono::steady_clock::time_point end,
                 double blocked_ms);

  void step_begin(int64_t step) override;
  void forward_begin(int64_t step, int64_t micro) override;
  void backward_begin(int64_t step, int64_t micro) override;
  void backward_end(int64_t step, int64_t micro) override;
  void reduction_begin(int64_t step) override;
  void optimizer_begin(int64_t step) override;
  void optimizer_end(int64_t step) override;
  void step_end(int64_t step, StepResult& r) override;

 private:
  struct Mark {  // one boundary: a timing point, the groups' wait points, the offload clock
    int point = 0;
    std::vector<int64_t> comm;
    double offload = 0;
  };
  struct Phase {
    const char* name;
    Mark from, to;
  };
  Mark mark(bool timed = true);
  double comm_between(const Mark& a, const Mark& b) const;
  void observe_waits(int64_t step, bool on);

  Backend& be_;
  std::vector<Comm*> groups_;
  OffloadClock& offload_;
  StepTrace* trace_;
  bool traced_ = false, timed_ = false;
  std::chrono::steady_clock::time_point host_start_, trace_origin_{};
  int start_point_ = 0;
  Mark open_;  // the phase under way began here
  std::vector<Phase> fwd_, bwd_;
  Phase optimizer_{"optimizer", {}, {}};
  double data_blocked_ms_ = 0;
  std::vector<std::pair<double, double>> data_spans_;  // (start, duration) ms from the step's start
};

}  // namespace zt
