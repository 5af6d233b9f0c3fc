// The GPU check's NCCL smoke test: ztrain's own NCCL communicator (engine/comm/comm_nccl.cpp, with
// its watchdog, device-side waits, pinned host all-reduce and the launch order across
// communicators) on one rank, on the GPU machine's NCCL, which no multi-rank run has met yet. Two
// communicators (like a tensor and a data group) on one GPU, each collective checked for its
// result and interleaved across the two, groups included; then the latency of a small all-reduce
// and a 64 MiB one by CUDA events. One JSON line on stdout; exit 0 when every result is right.
// Built against the one-rank MPI of tools/gpu_check/mpi_one_rank on a GPU machine, against MPI
// and the emulated NCCL with --emulated (run under mpirun -np 1).
#include <mpi.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/comm/comm_nccl.h"
#include "engine/comm/nccl_launch_order.h"

namespace {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "CUDA %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

struct Smoke {
  cudaStream_t producer = nullptr;
  std::unique_ptr<zt::Comm> tensor, data;
  int failures = 0;
  void expect(bool ok, const std::string& what) {
    if (!ok) std::fprintf(stderr, "wrong result: %s\n", what.c_str()), ++failures;
  }
  // every element of the n floats at `dev` equals v
  bool all_equal(const float* dev, size_t n, float v) {
    check(cudaStreamSynchronize(producer), "synchronize");
    std::vector<float> h(n);
    check(cudaMemcpy(h.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost), "copy");
    for (float x : h)
      if (x != v) return false;
    return true;
  }
  void fill(float* dev, size_t n, float v) {
    std::vector<float> h(n, v);
    check(cudaMemcpyAsync(dev, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, producer), "copy");
    check(cudaStreamSynchronize(producer), "synchronize");
  }
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int version = 0;
  ncclGetVersion(&version);
  Smoke s;
  check(cudaStreamCreateWithFlags(&s.producer, cudaStreamNonBlocking), "stream");
  s.tensor = zt::make_nccl_comm(MPI_COMM_WORLD, "tensor", /*timeout_s=*/30, s.producer);
  s.data = zt::make_nccl_comm(MPI_COMM_WORLD, "data", /*timeout_s=*/30, s.producer);
  const zt::nccl_order::Choice& order = zt::nccl_order::establish();
  constexpr size_t n = size_t(16) << 20;  // 64 MiB of floats
  float *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, n * sizeof(float)), "malloc");
  check(cudaMalloc(&b, n * sizeof(float)), "malloc");

  // each collective on each communicator (one rank: the result is the input)
  for (zt::Comm* c : {s.tensor.get(), s.data.get()}) {
    s.fill(a, n, 3.0f);
    c->wait(c->all_reduce(a, n, zt::ReduceOp::Sum));
    s.expect(s.all_equal(a, n, 3.0f), c->name() + " all_reduce");
    c->wait(c->reduce_scatter(a, b, n));
    s.expect(s.all_equal(b, n, 3.0f), c->name() + " reduce_scatter");
    s.fill(b, n, 5.0f);
    c->wait(c->all_gather(b, a, n));
    s.expect(s.all_equal(a, n, 5.0f), c->name() + " all_gather");
    c->wait(c->broadcast(a, n, 0));
    s.expect(s.all_equal(a, n, 5.0f), c->name() + " broadcast");
    double d[3] = {1.5, -2.0, 1e300};
    c->all_reduce_doubles(d, 3);
    s.expect(d[0] == 1.5 && d[1] == -2.0 && d[2] == 1e300, c->name() + " all_reduce_doubles");
  }
  // interleaved across the two communicators, groups among them (the launch order's case)
  s.fill(a, n, 1.0f);
  s.fill(b, n, 2.0f);
  for (int i = 0; i < 20; ++i) {
    zt::Comm& c = i % 2 ? *s.data : *s.tensor;
    c.group_begin();
    const auto h1 = c.all_reduce(a, n / 2, zt::ReduceOp::Sum);
    const auto h2 = c.all_reduce(b + n / 2, n / 2, zt::ReduceOp::Max);
    c.group_end();
    (i % 2 ? *s.tensor : *s.data).wait((i % 2 ? *s.tensor : *s.data).all_reduce(b, n / 4, zt::ReduceOp::Sum));
    c.wait(h1);
    c.wait(h2);
  }
  s.expect(s.all_equal(a, n / 2, 1.0f) && s.all_equal(b, n, 2.0f), "interleaved collectives");

  // latency (4 KiB) and a 64 MiB all-reduce, by CUDA events on the producer stream
  auto time_us = [&](size_t count, int reps) {
    cudaEvent_t t0, t1;
    check(cudaEventCreate(&t0), "event");
    check(cudaEventCreate(&t1), "event");
    s.tensor->wait(s.tensor->all_reduce(a, count, zt::ReduceOp::Sum));  // warm
    check(cudaEventRecord(t0, s.producer), "record");
    for (int i = 0; i < reps; ++i) s.tensor->wait(s.tensor->all_reduce(a, count, zt::ReduceOp::Sum));
    check(cudaEventRecord(t1, s.producer), "record");
    check(cudaEventSynchronize(t1), "synchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, t0, t1), "elapsed");
    return 1e3 * double(ms) / reps;
  };
  const double small_us = time_us(1024, 200), large_us = time_us(n, 20);
  const char* mode = order.mode == zt::nccl_order::Mode::Implicit ? "implicit" : "serial";
  std::printf("{\"check\": \"nccl_smoke\", \"nccl_version\": %d, \"launch_order\": \"%s\", \"ranks\": 1, "
              "\"communicators\": 2, \"wrong_results\": %d, \"all_reduce_4KiB_us\": %.2f, "
              "\"all_reduce_64MiB_us\": %.1f, \"ok\": %s}\n",
              version, mode, s.failures, small_us, large_us, s.failures == 0 ? "true" : "false");
  s.tensor.reset();
  s.data.reset();
  MPI_Finalize();
  return s.failures == 0 ? 0 : 1;
}
