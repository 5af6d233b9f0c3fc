// Every NCCL collective is under the watchdog before the host can block on it (issue 44: the
// all-reduce of host doubles, every step, copied its result into pageable memory, which waits for
// the stream on the host before the collective was tracked: a stopped peer hung the job with no
// timeout). Rank 1 never enters all_reduce_doubles; rank 0's must end the job at the timeout.
// Run by tests/cuda_emu/nccl_watchdog.py under mpirun, on the emulated device and NCCL.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"
#include "engine/comm/device_comms.h"
#include "engine/comm/topology.h"

int main(int argc, char** argv) {
  zt::dist_init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto gpu = zt::make_backend(zt::DeviceChoice::Cuda, 1, rank);
  auto comm = zt::make_nccl_comm(MPI_COMM_WORLD, "world", /*timeout_s=*/3, gpu->native_stream());
  if (rank == 1) {  // stopped: alive, never issuing the collective
    std::this_thread::sleep_for(std::chrono::seconds(600));
    return 0;
  }
  double x = 1;
  comm->all_reduce_doubles(&x, 1);
  std::printf("all_reduce_doubles returned without its peer\n");
  return 1;
}
