// Counter-based random numbers (Philox-4x32-10). A value depends only on (key, counter), never on
// call order or thread, so a parameter element drawn from (seed, name, global index) is the same
// whatever the layout of ranks, shards and threads that computes it.
#pragma once
#include <cstdint>
#include <string_view>

#include "engine/core/philox.h"

namespace zt {

// One Philox-4x32-10 block for a 64-bit key and a 128-bit counter.
Philox4 philox4x32(uint64_t key, uint64_t counter_lo, uint64_t counter_hi);

// Stable 64-bit hash of a name (FNV-1a); part of the on-disk/reproducibility contract.
uint64_t name_hash(std::string_view name);

// Uniform in (0, 1], from 32 random bits.
inline double uniform_from_bits(uint32_t bits) { return (bits + 1.0) * (1.0 / 4294967296.0); }

// Standard normal for element `index` of the stream (seed, stream_id): Box-Muller on one block.
double normal_at(uint64_t seed, uint64_t stream_id, uint64_t index);

// Uniform 64-bit value for element `index` of the stream (seed, stream_id).
uint64_t bits64_at(uint64_t seed, uint64_t stream_id, uint64_t index);

}  // namespace zt
