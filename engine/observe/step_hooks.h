// What a training step tells those who watch it: the points between its phases. The step
// (engine/job/step.h) calls them in this order, every rank alike:
//   step_begin, then per micro-batch forward_begin, backward_begin, backward_end; reduction_begin,
//   gradients_final, loss_reduced, optimizer_begin, optimizer_end, then step_end once the device
//   has synchronized.
// The step breakdown and trace (step_breakdown.h), the failure tests' faults and the collective
// checks' step marks (engine/train/run_hooks.h) attach here, so that the step itself holds no
// timing and no test hooks.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/observe/step_result.h"

namespace zt {

class StepHook {
 public:
  virtual ~StepHook() = default;
  virtual void step_begin(int64_t step) { (void)step; }
  virtual void forward_begin(int64_t step, int64_t micro) { (void)step, (void)micro; }
  virtual void backward_begin(int64_t step, int64_t micro) { (void)step, (void)micro; }  // forward done
  virtual void backward_end(int64_t step, int64_t micro) { (void)step, (void)micro; }
  virtual void reduction_begin(int64_t step) { (void)step; }
  // The gradient reductions are done: every gradient this rank holds is final (not yet clipped).
  virtual void gradients_final(int64_t step) { (void)step; }
  // The step's loss, the mean over the global batch, agreed over the data-parallel group; a hook
  // may change it (the spike policy's test).
  virtual void loss_reduced(int64_t step, double& loss) { (void)step, (void)loss; }
  virtual void optimizer_begin(int64_t step) { (void)step; }  // clipping, the agreement, AdamW
  virtual void optimizer_end(int64_t step) { (void)step; }    // the step's work is all issued
  virtual void step_end(int64_t step, StepResult& r) { (void)step, (void)r; }
};

// Several hooks, called in the order they were added.
class StepHooks final : public StepHook {
 public:
  void add(StepHook* h) { hooks_.push_back(h); }
  void step_begin(int64_t s) override { each([&](StepHook* h) { h->step_begin(s); }); }
  void forward_begin(int64_t s, int64_t m) override { each([&](StepHook* h) { h->forward_begin(s, m); }); }
  void backward_begin(int64_t s, int64_t m) override { each([&](StepHook* h) { h->backward_begin(s, m); }); }
  void backward_end(int64_t s, int64_t m) override { each([&](StepHook* h) { h->backward_end(s, m); }); }
  void reduction_begin(int64_t s) override { each([&](StepHook* h) { h->reduction_begin(s); }); }
  void gradients_final(int64_t s) override { each([&](StepHook* h) { h->gradients_final(s); }); }
  void loss_reduced(int64_t s, double& l) override { each([&](StepHook* h) { h->loss_reduced(s, l); }); }
  void optimizer_begin(int64_t s) override { each([&](StepHook* h) { h->optimizer_begin(s); }); }
  void optimizer_end(int64_t s) override { each([&](StepHook* h) { h->optimizer_end(s); }); }
  void step_end(int64_t s, StepResult& r) override { each([&](StepHook* h) { h->step_end(s, r); }); }

 private:
  template <typename F>
  void each(F&& f) {
    for (StepHook* h : hooks_) f(h);
  }
  std::vector<StepHook*> hooks_;
};

}  // namespace zt
