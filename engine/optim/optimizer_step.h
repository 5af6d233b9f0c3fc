// The optimizer step over the ZeRO placement's states: AdamW on each block of this rank's states
// that the store's tier yields (the spans in the backend's or pinned memory as they are; NVMe
// blocks streamed through pinned buffers), and the early host AdamW that runs during backward
// when the optimizer is offloaded to CPU memory (early_update.h).
#pragma once
#include "engine/optim/adamw.h"
#include "engine/optim/early_update.h"
#include "engine/parallel/param_store.h"

namespace zt {

// Step t (>= 1) of AdamW at learning rate lr over every state of this rank (after clipping): the
// groups `early` stepped during backward are waited for, the others stepped here.
void adamw_step(ParamStore& store, EarlyUpdate& early, AdamW& opt, double lr, int t);

// Schedules step t's AdamW of each group as soon as its gradient is final during backward
// (offload to CPU memory at ZeRO 2-3, no clipping, no loss scaling); the step's adamw_step then
// waits for it. False where it does not apply.
bool schedule_early_adamw(EarlyUpdate& early, AdamW& opt, double lr, int t);

}  // namespace zt
