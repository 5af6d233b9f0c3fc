// Core slices per rank (see core_binding.h).
#include "engine/offload/core_binding.h"

#include <sched.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <vector>

namespace zt {

int bind_rank_to_cores(int local_rank, int local_size) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) return 1;
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mask)) cores.push_back(c);
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  // already bound by the launcher (fewer cores than the machine's), or alone on the machine
  if (local_size <= 1 || long(cores.size()) < online) return int(cores.size());
  const size_t per = std::max<size_t>(1, cores.size() / size_t(local_size));
  const size_t lo = (size_t(local_rank) * per) % cores.size(), hi = std::min(cores.size(), lo + per);
  cpu_set_t slice;
  CPU_ZERO(&slice);
  for (size_t i = lo; i < hi; ++i) CPU_SET(cores[i], &slice);
  if (sched_setaffinity(0, sizeof slice, &slice) != 0) return int(cores.size());
  spdlog::info("offload: local rank {} of {} bound to cores {}-{} for its host work", local_rank, local_size, cores[lo],
               cores[hi - 1]);
  return int(hi - lo);
}

}  // namespace zt
