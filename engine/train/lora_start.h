// What a run with low-rank adapters ([lora]) does as it starts, beside the trainer's loading: it
// records the frozen base (where it came from, its weights' fingerprint) for its checkpoints,
// refuses a checkpoint whose adapters were trained on another base, and starts a fresh run's
// adapters from a PEFT directory ([lora] init_from).
#pragma once
#include <cstdint>
#include <string>

#include "engine/checkpoint/checkpoint.h"
#include "engine/comm/comm.h"
#include "engine/config/spec.h"
#include "engine/job/job.h"

namespace zt {

struct LoraBase {
  std::string origin;  // [model] init_from, or "seed N"; "" without adapters
  uint64_t fingerprint = 0;
};

// The job's frozen base, after it is loaded (collective over `world`; logs on the root).
LoraBase lora_base(Job& job, const RunSpec& spec, Comm& world, bool root);
// UserError when checkpoint `path` (state st) holds adapters of another base than `base`.
void check_lora_base(const TrainState& st, const LoraBase& base, const std::string& path);
// [lora] init_from: this rank's adapters from the PEFT directory (UserError when it does not fit;
// not collective: the caller agrees, then publishes the written masters).
void init_lora_from_peft(Job& job, const RunSpec& spec, bool root);

}  // namespace zt
