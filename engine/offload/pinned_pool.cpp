// The per-rank pinned pool (see pinned_pool.h).
#include "engine/offload/pinned_pool.h"

#include <algorithm>

#include <unistd.h>

#include "engine/core/byte_size.h"
#include "engine/core/status.h"

namespace zt {

PinnedPool pinned_pool(const RunSpec& spec, int local_ranks) {
  const double host_memory = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  local_ranks = std::max(1, local_ranks);
  PinnedPool p;
  p.from_spec = !spec.offload.pinned_limit.empty();
  p.limit = p.from_spec ? double(parse_byte_size(spec.offload.pinned_limit, "[offload] pinned_limit"))
                        : host_memory / 2 / local_ranks;
  if (p.limit * local_ranks > host_memory)  // the ranks on this machine each have a pool
    user_error("{}: [offload] pinned_limit = \"{}\" x {} rank(s) on this machine is more than its {:.3f} GiB of "
               "memory: pinned pages cannot be swapped, so the machine would run out of memory",
               spec.source, spec.offload.pinned_limit, local_ranks, host_memory / 1073741824.0);
  return p;
}

void check_pinned_fits(const PinnedPool& pool, double needed, const RunSpec& spec) {
  if (needed > pool.limit)
    user_error("{}: the offloaded states need {:.3f} MiB of pinned host memory per rank ({:.0f} bytes), more than "
               "the pinned pool of {:.3f} MiB ({}): raise [offload] pinned_limit, use optimizer = \"nvme\", or more "
               "ranks", spec.source, needed / 1048576.0, needed, pool.limit / 1048576.0,
               pool.from_spec ? "[offload] pinned_limit" : "half this machine's memory over its ranks");
}

}  // namespace zt
