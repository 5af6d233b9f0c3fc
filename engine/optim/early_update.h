// The early host AdamW: with the optimizer offloaded to CPU memory at ZeRO 2-3, step t's update of
// each group runs on a background thread as soon as the store has the group's final gradient on
// the host (ParamStore::on_units_final), while backward goes on. Exact only when nothing global
// (clipping by the norm, fp16 unscaling, a skip decision) must first see the gradients: the step
// (engine/job/step.cpp) asks for it only then.
#pragma once
#include <memory>
#include <vector>

#include "engine/core/serial_worker.h"
#include "engine/parallel/param_store.h"

namespace zt {

class EarlyUpdate {
 public:
  explicit EarlyUpdate(ParamStore& store) : store_(store) {}
  ~EarlyUpdate() { cancel(); }
  EarlyUpdate(const EarlyUpdate&) = delete;
  EarlyUpdate& operator=(const EarlyUpdate&) = delete;

  // Step t's update by `step`, group by group during the coming backward (before the step's last
  // micro-batch). False where it does not apply (no offload to CPU memory, NVMe, ZeRO 0-1).
  bool schedule(int t, SpanStep step);
  // At the optimizer step: waits for the groups stepped during backward and steps the rest (none,
  // normally). False when none was scheduled: the caller steps every state itself.
  bool finish(int t, const SpanStep& step);
  // Drops a scheduled update and waits for its queued work (a step that failed midway, before the
  // optimizer or the store goes). Never throws.
  void cancel() noexcept;

 private:
  ParamStore& store_;
  std::unique_ptr<SerialWorker> worker_;  // created at the first schedule
  SpanStep step_;                         // empty: none scheduled
  int t_ = 0;
  std::vector<char> stepped_;             // per span (unit) of the store
};

}  // namespace zt
