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
// values are the states' master weights as read (a frozen base in 16 bits: its 16-bit values),
// each hashed as its bf16 rounding, so that a base held in fp32 and the same one in bf16 or fp16
// agree (fp16's rounding then bf16's can differ from bf16's at a tie: vanishingly rare).
// Collective over `world`: each rank hashes the runs it owns.
uint64_t weights_fingerprint(const ModelStates& states, const ParamTable& table, Comm& world);

// The same fingerprint summed element by element, for weights read elsewhere (an export reading a
// base from its files): add() every sampled element (index g in its tensor's full row-major
// layout, ours: (out, in)) of every tensor; value() is the fingerprint when one process added all.
struct FingerprintSums {
  uint64_t lo = 0, hi = 0;  // two 32-bit sums (so that ranks' sums add exactly as doubles)
  static bool sampled(size_t g);
  void add(uint64_t name_hash, size_t g, float v);
  uint64_t value() const { return lo | (hi << 32); }
};

}  // namespace zt
