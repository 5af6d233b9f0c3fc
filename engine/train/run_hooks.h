// What the run attaches to the step (engine/job/step.h) besides the breakdown: the failure tests'
// faults (engine/core/faults.h) at the points where a real failure would strike, and the
// collective checks' step marks (the flight recorder's step, the order check's step boundaries).
#pragma once
#include "engine/backend/backend.h"
#include "engine/comm/collective_order.h"
#include "engine/comm/topology.h"
#include "engine/observe/step_hooks.h"
#include "engine/parallel/param_store.h"

namespace zt {

// Each fault only where its environment variable asks for it: a slow host or rank, a rank that
// exits abruptly or stops responding mid-step, a NaN in one rank's gradients, a loss spike.
class FaultHooks final : public StepHook {
 public:
  FaultHooks(const Topology& topo, Backend& be, ParamStore& store) : topo_(topo), be_(be), store_(store) {}
  void step_begin(int64_t step) override;
  void forward_begin(int64_t step, int64_t micro) override;
  void backward_begin(int64_t step, int64_t micro) override;
  void gradients_final(int64_t step) override;
  void loss_reduced(int64_t step, double& loss) override;

 private:
  const Topology& topo_;
  Backend& be_;
  ParamStore& store_;
};

class CollectiveStepMarks final : public StepHook {
 public:
  explicit CollectiveStepMarks(CollectiveOrder* order) : order_(order) {}
  void step_begin(int64_t step) override;
  // every rank issued this step's collectives in one order (after the device synchronized)
  void step_end(int64_t step, StepResult& r) override;

 private:
  CollectiveOrder* order_;  // null when the order check is off
};

}  // namespace zt
