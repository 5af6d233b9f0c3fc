// Test-only fault injection, in one place. The failure and verdict tests make ztrain misbehave on
// purpose (a slow disk, a crashed rank, a save interrupted half-way) through ZTRAIN_FAULT_* and
// ZTRAIN_TEST_* environment variables; production code asks faults() instead of reading the
// environment, so every hook is listed here and the variables are read once, at the first call
// (main makes that call before anything else runs).
#pragma once
#include <cstdint>

namespace zt {

// A hook aimed at one rank and one 0-based step ("RANK:STEP"); inactive when rank < 0.
struct RankStep {
  int rank = -1;
  int64_t step = -1;
  bool hits(int r, int64_t s) const { return rank >= 0 && r == rank && s == step; }
};

struct Faults {
  int slow_data_ms = 0;       // ZTRAIN_FAULT_SLOW_DATA_MS: each batch takes this much longer to assemble
  int slow_comm_ms = 0;       // ZTRAIN_FAULT_SLOW_COMM_MS: each wait on an MPI collective, longer
  int slow_nvme_ms = 0;       // ZTRAIN_FAULT_SLOW_NVME_MS: each wait on an NVMe request, longer
  int slow_host_ms = 0;       // ZTRAIN_FAULT_SLOW_HOST_MS: each step spends this on the host, unmeasured
  // ZTRAIN_FAULT_SLOW_RANK="RANK:MS": that rank's forward takes MS longer each micro-batch (the
  // straggler verdict's test: a slow device or a noisy neighbour)
  int slow_rank = -1, slow_rank_ms = 0;
  // ZTRAIN_FAULT_SLOW_SOURCE="NAME:MS": each sample of that data source takes MS longer to read
  char slow_source[64] = {};
  int slow_source_ms = 0;
  long nvme_write_fails = 0;  // ZTRAIN_FAULT_NVME_WRITES=N: the N-th NVMe write of the process fails (EIO)
  RankStep exit;              // ZTRAIN_FAULT_EXIT: that rank exits abruptly in the middle of that step
  RankStep hang;              // ZTRAIN_FAULT_HANG: that rank stops responding in that step
                              // (both: not in attempts > 1 of `ztrain supervise`, ZTRAIN_ATTEMPT)
  RankStep nan_grad;          // ZTRAIN_FAULT_NAN_GRAD: that rank's gradients hold a NaN in that step
  // ZTRAIN_FAULT_LOSS_SPIKE="STEP:FACTOR[:COUNT]": the loss of COUNT (1) steps from that 0-based
  // step, as every rank sees it, x FACTOR
  int64_t loss_spike_step = -1, loss_spike_steps = 1;
  double loss_spike_factor = 1;
  RankStep pause_save;        // ZTRAIN_TEST_PAUSE_SAVE: that rank stops half-way through saving that step
  // ZTRAIN_FAULT_HOLD_COMM_INIT="RANK:SECONDS": that rank waits before each device communicator's
  // init (a hung driver call, a slow node): the others must not wait forever
  int hold_comm_init_rank = -1, hold_comm_init_s = 0;
  // ZTRAIN_FAULT_SKIP_COMM_STREAM_WAIT=1: an NCCL wait() returns without making the consuming
  // stream wait for the collective (the planted bug the emulated device's streams must expose)
  bool skip_comm_stream_wait = false;
  // ZTRAIN_FAULT_NCCL_UNORDERED=1: collectives of different NCCL communicators are launched with no
  // order kept on the GPU (engine/comm/nccl_launch_order.h; the emulated NCCL's check must fail it)
  bool nccl_unordered = false;
  // ZTRAIN_FAULT_SWAP_COLLECTIVES: that rank issues two consecutive collectives of different
  // groups in the other order in that step (the collective order check must name them)
  RankStep swap_collectives;
  // ZTRAIN_CHECK_COLLECTIVE_ORDER=1 (or 0): a check, not a fault; on by default in debug builds.
  // Each rank hashes the collectives it issued in each step and the ranks compare the hashes.
  bool check_collective_order = false;
};

// The hooks set in this process's environment (all off in a normal run).
const Faults& faults();

// Sleeps ms milliseconds when ms > 0: how the slow_* hooks take effect.
void injected_delay(int ms);

}  // namespace zt
