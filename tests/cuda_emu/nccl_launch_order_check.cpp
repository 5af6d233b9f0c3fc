// Collectives of two NCCL communicators on one GPU keep one order (issue 44: the tensor- and
// data-parallel groups ran on communicators of their own with no order established on the GPU).
// Group "a" follows slow work on its producer stream (a large matmul); group "b"'s producer has
// none, so b's collective, launched after a's, is ready first. NCCL_LAUNCH_ORDER_IMPLICIT (set by
// ztrain) or ztrain's own serial order must hold b until a has started; the emulated NCCL fails an
// unordered start (engine/backend/cuda_emu/nccl.cpp). Prints "sums ok" and exits 0 when both
// all-reduces are right. Run by tests/cuda_emu/nccl_launch_order.py under mpirun (2 ranks).
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"
#include "engine/comm/device_comms.h"
#include "engine/comm/topology.h"

int main(int argc, char** argv) {
  zt::dist_init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto gpu_a = zt::make_backend(zt::DeviceChoice::Cuda, 1, rank);  // two backends: two producer streams
  auto gpu_b = zt::make_backend(zt::DeviceChoice::Cuda, 1, rank);
  auto a = zt::make_nccl_comm(MPI_COMM_WORLD, "a", /*timeout_s=*/60, gpu_a->native_stream());
  auto b = zt::make_nccl_comm(MPI_COMM_WORLD, "b", /*timeout_s=*/60, gpu_b->native_stream());
  constexpr int N = 1024, n = 1024;  // an (N x N) x (N x N) fp32 product: 2 G FLOP, a fraction of a second emulated
  float* x = static_cast<float*>(gpu_a->alloc(size_t(N) * N * sizeof(float)));
  float* y = static_cast<float*>(gpu_a->alloc(size_t(N) * N * sizeof(float)));
  float* va = static_cast<float*>(gpu_a->alloc(n * sizeof(float)));
  float* vb = static_cast<float*>(gpu_b->alloc(n * sizeof(float)));
  const std::vector<float> ones(size_t(N) * N, 1.0f), mine(n, float(rank + 1));
  gpu_a->copy_to_device(x, ones.data(), ones.size() * sizeof(float));
  gpu_a->copy_to_device(va, mine.data(), n * sizeof(float));
  gpu_b->copy_to_device(vb, mine.data(), n * sizeof(float));
  gpu_a->synchronize();
  gpu_b->synchronize();
  gpu_a->matmul_forward(y, x, x, nullptr, N, N, N);  // slow work before a's collective
  const zt::Comm::Handle ha = a->all_reduce(va, n, zt::ReduceOp::Sum);
  const zt::Comm::Handle hb = b->all_reduce(vb, n, zt::ReduceOp::Sum);
  a->wait(ha);
  b->wait(hb);
  gpu_a->synchronize();
  gpu_b->synchronize();
  std::vector<float> ra(n), rb(n);
  gpu_a->copy_to_host(ra.data(), va, n * sizeof(float));
  gpu_b->copy_to_host(rb.data(), vb, n * sizeof(float));
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const float want = float(size * (size + 1) / 2);
  for (int i = 0; i < n; ++i)
    if (ra[i] != want || rb[i] != want) {
      std::printf("rank %d: element %d: %g and %g, want %g\n", rank, i, ra[i], rb[i], want);
      return 1;
    }
  std::printf("rank %d: sums ok\n", rank);
  a.reset();
  b.reset();
  zt::dist_finalize();
  return 0;
}
