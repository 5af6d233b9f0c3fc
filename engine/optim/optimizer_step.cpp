// AdamW over the store's blocks (see optimizer_step.h).
#include "engine/optim/optimizer_step.h"

namespace zt {

void adamw_step(ParamStore& store, EarlyUpdate& early, AdamW& opt, double lr, int t) {
  auto step = [&](const std::vector<StateSpan>& spans) { opt.step(spans, lr, t); };
  if (!early.finish(t, step)) store.step_states(t, step);
}

bool schedule_early_adamw(EarlyUpdate& early, AdamW& opt, double lr, int t) {
  return early.schedule(t, [&opt, lr, t](const std::vector<StateSpan>& spans) { opt.step(spans, lr, t); });
}

}  // namespace zt
