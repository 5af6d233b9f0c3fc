// A fingerprint of a model's weights that does not depend on the layout holding them: what a LoRA
// checkpoint records of the frozen base it was trained on, so that a resume on other base weights
// (another init_from, another seed) is refused by name instead of training adapters that no
// longer fit.
#pragma once
#include <cstdint>

#include "engine/comm/comm.h"
#include "engine/model/model_states.h"
#include "engine/model/param_table.h"

namespace zt {

// A 64-bit hash of a fixed sample of the weights' elements (each tensor's first 1024 elements and
// every 1021st after them, by index in the full tensor) with their names and indexes, summed over
// the elements: the same for any tensor-parallel split, ZeRO stage or rank count, and different
// for weights that differ (another checkpoint of a model differs in nearly every element). The
// values are the states' master weights as read (a frozen base in 16 bits: its 16-bit values).
// Collective over `world`: each rank hashes the runs it owns.
uint64_t weights_fingerprint(const ModelStates& states, const ParamTable& table, Comm& world);

}  // namespace zt
