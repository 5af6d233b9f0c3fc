// The early host AdamW (see early_update.h).
#include "engine/optim/early_update.h"

#include "engine/core/status.h"

namespace zt {

bool EarlyUpdate::schedule(int t, SpanStep step) {
  if (!store_.gradients_final_during_backward()) return false;
  if (!worker_) worker_ = std::make_unique<SerialWorker>();
  step_ = std::move(step), t_ = t;
  stepped_.assign(store_.spans().size(), 0);
  store_.on_units_final([this](const std::vector<int>& units) {
    std::vector<StateSpan> part;
    for (int u : units) part.push_back(store_.spans()[size_t(u)]), stepped_[size_t(u)] = 1;
    worker_->submit([step = step_, part = std::move(part)] { step(part); });
  });
  return true;
}

bool EarlyUpdate::finish(int t, const SpanStep& step) {
  if (!step_) return false;
  ZT_CHECK(t_ == t, "the early update was scheduled for step {}, not {}", t_, t);
  step_ = nullptr;
  store_.on_units_final(nullptr);
  worker_->wait();
  store_.step_states(t, step, &stepped_);
  return true;
}

void EarlyUpdate::cancel() noexcept {
  step_ = nullptr;
  store_.on_units_final(nullptr);  // complete() submits no more
  try {
    if (worker_) worker_->wait();
  } catch (...) {
  }
}

}  // namespace zt
