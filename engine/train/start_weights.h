// Where a run's weights come from as it starts, besides its own checkpoints (the trainer's):
// [model] init_from, a Hugging Face directory loaded into this layout; with low-rank adapters
// ([lora]) the record of the frozen base (where it came from, its weights' fingerprint) that
// checkpoints keep, the refusal of a checkpoint whose adapters were trained on another base, and
// a fresh run's adapters from a PEFT directory ([lora] init_from).
#pragma once
#include <cstdint>
#include <string>

#include "engine/checkpoint/checkpoint.h"
#include "engine/comm/comm.h"
#include "engine/comm/topology.h"
#include "engine/config/spec.h"
#include "engine/job/job.h"

namespace zt {

// [model] init_from: the Hugging Face weights into the job's model weights (the frozen base with
// adapters), on every rank, agreed (a UserError on one rank ends all of them alike).
void load_hf_init(Job& job, const RunSpec& spec, const Topology& topo);

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
