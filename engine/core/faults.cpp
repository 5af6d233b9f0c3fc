// The fault-injection hooks (see faults.h), read from the environment once.
#include "engine/core/faults.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace zt {

namespace {
int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

RankStep env_rank_step(const char* name) {
  RankStep h;
  const char* v = std::getenv(name);
  int r = -1;
  long long s = -1;
  if (v && std::sscanf(v, "%d:%lld", &r, &s) == 2) h = {r, s};
  return h;
}
}  // namespace

const Faults& faults() {
  static const Faults f = [] {
    Faults x;
    x.slow_data_ms = env_int("ZTRAIN_FAULT_SLOW_DATA_MS");
    x.slow_comm_ms = env_int("ZTRAIN_FAULT_SLOW_COMM_MS");
    x.slow_nvme_ms = env_int("ZTRAIN_FAULT_SLOW_NVME_MS");
    x.slow_host_ms = env_int("ZTRAIN_FAULT_SLOW_HOST_MS");
    if (const char* s = std::getenv("ZTRAIN_FAULT_SLOW_RANK"))
      if (std::sscanf(s, "%d:%d", &x.slow_rank, &x.slow_rank_ms) != 2) x.slow_rank = -1;
    const char* w = std::getenv("ZTRAIN_FAULT_NVME_WRITES");
    x.nvme_write_fails = w ? std::atol(w) : 0L;
    x.exit = env_rank_step("ZTRAIN_FAULT_EXIT");
    x.hang = env_rank_step("ZTRAIN_FAULT_HANG");
    x.pause_save = env_rank_step("ZTRAIN_TEST_PAUSE_SAVE");
    x.nan_grad = env_rank_step("ZTRAIN_FAULT_NAN_GRAD");
    if (const char* s = std::getenv("ZTRAIN_FAULT_LOSS_SPIKE")) {
      long long st = -1, n = 1;
      if (std::sscanf(s, "%lld:%lf:%lld", &st, &x.loss_spike_factor, &n) >= 2) x.loss_spike_step = st, x.loss_spike_steps = n;
    }
    if (const char* s = std::getenv("ZTRAIN_FAULT_SLOW_SOURCE"))
      if (std::sscanf(s, "%63[^:]:%d", x.slow_source, &x.slow_source_ms) != 2) x.slow_source_ms = 0;
    if (const char* h = std::getenv("ZTRAIN_FAULT_HOLD_COMM_INIT"))
      if (std::sscanf(h, "%d:%d", &x.hold_comm_init_rank, &x.hold_comm_init_s) != 2) x.hold_comm_init_rank = -1;
    x.skip_comm_stream_wait = env_int("ZTRAIN_FAULT_SKIP_COMM_STREAM_WAIT") == 1;
    x.nccl_unordered = env_int("ZTRAIN_FAULT_NCCL_UNORDERED") == 1;
    x.swap_collectives = env_rank_step("ZTRAIN_FAULT_SWAP_COLLECTIVES");
    // under `ztrain supervise` a crash or hang is injected in the first attempt only: the restarted
    // job would otherwise meet it again at the same step
    if (env_int("ZTRAIN_ATTEMPT") > 1) x.exit = {}, x.hang = {};
#ifdef NDEBUG
    x.check_collective_order = env_int("ZTRAIN_CHECK_COLLECTIVE_ORDER") == 1;
#else
    x.check_collective_order = !std::getenv("ZTRAIN_CHECK_COLLECTIVE_ORDER") || env_int("ZTRAIN_CHECK_COLLECTIVE_ORDER") == 1;
#endif
    return x;
  }();
  return f;
}

void injected_delay(int ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

}  // namespace zt
