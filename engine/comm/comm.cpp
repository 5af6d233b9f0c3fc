// What every communicator shares (see comm.h): the exposed-time ledger of its waits and the
// timeout message.
#include "engine/comm/comm.h"

#include <algorithm>
#include <cstdio>

namespace zt {

int64_t Comm::begin_wait() {
  // The breakdown reads the waits of the current step only: keep the last million.
  constexpr size_t kKept = size_t(1) << 20;
  if (wait_ms_.size() >= 2 * kKept) {
    wait_ms_.erase(wait_ms_.begin(), wait_ms_.begin() + std::ptrdiff_t(kKept));
    first_wait_ += int64_t(kKept);
  }
  wait_ms_.push_back(0);
  return first_wait_ + int64_t(wait_ms_.size()) - 1;
}

void Comm::set_wait_ms(int64_t index, double ms) {
  if (index >= first_wait_ && index < first_wait_ + int64_t(wait_ms_.size())) wait_ms_[size_t(index - first_wait_)] = ms;
}

double Comm::exposed_ms(int64_t from, int64_t to) {
  double ms = 0;
  for (int64_t i = std::max(from, first_wait_); i < std::min(to, first_wait_ + int64_t(wait_ms_.size())); ++i)
    ms += wait_ms_[size_t(i - first_wait_)];
  return ms;
}

namespace {
CommHooks g_hooks;
}

void set_comm_hooks(CommHooks hooks) { g_hooks = hooks; }

void comm_idle_poll() {
  if (g_hooks.poll) g_hooks.poll();
}

void print_collective_timeout(int world_rank, const char* what, size_t n, const std::string& group,
                              double timeout_s) {
  std::fprintf(stderr,
               "ztrain: failure: rank %d: collective %s of %zu elements on group %s did not complete "
               "within %.0f s ([comm] timeout_s); another rank has probably failed. Aborting the job.\n",
               world_rank, what, n, group.c_str(), timeout_s);
  std::fflush(stderr);
  if (!g_hooks.diagnose) return;
  const std::string why = g_hooks.diagnose(group);
  if (!why.empty()) std::fprintf(stderr, "ztrain: rank %d: %s\n", world_rank, why.c_str());
  std::fflush(stderr);
}

}  // namespace zt
