// AdamW over the store's blocks (see optimizer_step.h).
#include "engine/optim/optimizer_step.h"

namespace zt {

void adamw_step(ParamStore& store, AdamW& opt, double lr, int t) {
  store.step_states(t, [&](const std::vector<StateSpan>& spans) { opt.step(spans, lr, t); });
}

bool schedule_early_adamw(ParamStore& store, AdamW& opt, double lr, int t) {
  return store.schedule_early_update(t, [&opt, lr, t](const std::vector<StateSpan>& spans) { opt.step(spans, lr, t); });
}

}  // namespace zt
