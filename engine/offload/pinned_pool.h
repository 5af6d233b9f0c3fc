// The pinned host memory one rank may hold: one bounded pool per rank, [offload] pinned_limit or
// half the machine's memory shared by the ranks on it (pinned pages cannot be swapped: a machine
// whose ranks pin more than it has runs out of memory).
#pragma once
#include "engine/config/spec.h"

namespace zt {

struct PinnedPool {
  double limit = 0;        // bytes
  bool from_spec = false;  // [offload] pinned_limit set (else the machine's share)
};

// This rank's pool with `local_ranks` ranks on this machine; UserError when the ranks' pools
// together exceed its memory.
PinnedPool pinned_pool(const RunSpec& spec, int local_ranks);

// UserError naming the numbers and the fixes when `needed` bytes of offloaded states (and the NVMe
// tier's block buffers) exceed the pool.
void check_pinned_fits(const PinnedPool& pool, double needed, const RunSpec& spec);

}  // namespace zt
