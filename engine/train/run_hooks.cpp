// The run's step hooks (see run_hooks.h).
#include "engine/train/run_hooks.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "engine/comm/flight_recorder.h"
#include "engine/core/faults.h"

namespace zt {

void FaultHooks::step_begin(int64_t) { injected_delay(faults().slow_host_ms); }  // the host-bound verdict's test

void FaultHooks::forward_begin(int64_t, int64_t) {
  if (faults().slow_rank == topo_.world_rank) injected_delay(faults().slow_rank_ms);  // the straggler test
}

// That rank exits abruptly (no cleanup, no MPI_Finalize) in the middle of the step, as a crashed
// process would, or stops responding, as a wedged one would.
void FaultHooks::backward_begin(int64_t step, int64_t) {
  const int rank = topo_.world_rank;
  if (faults().exit.hits(rank, step)) {
    std::fprintf(stderr, "ztrain: fault injection: rank %d exits during step %lld\n", rank, (long long)step + 1);
    std::fflush(stderr);
    std::_Exit(3);
  }
  if (faults().hang.hits(rank, step)) {
    std::fprintf(stderr, "ztrain: fault injection: rank %d hangs during step %lld\n", rank, (long long)step + 1);
    std::fflush(stderr);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

void FaultHooks::gradients_final(int64_t step) {
  if (!faults().nan_grad.hits(topo_.world_rank, step)) return;  // the skip policy's test: one rank's gradient
  for (const StateSpan& s : store_.spans())
    if (s.n > 0) {
      const float nan = std::nanf("");
      be_.copy_to_device(s.grad, &nan, sizeof nan);
      return;
    }
}

void FaultHooks::loss_reduced(int64_t step, double& loss) {
  if (step >= faults().loss_spike_step && step < faults().loss_spike_step + faults().loss_spike_steps)
    loss *= faults().loss_spike_factor;  // the spike policy's test
}

void CollectiveStepMarks::step_begin(int64_t step) {
  if (order_) order_->begin_step(step);
  flight_set_step(step);
}

void CollectiveStepMarks::step_end(int64_t, StepResult&) {
  if (order_) order_->end_step();
}

}  // namespace zt
