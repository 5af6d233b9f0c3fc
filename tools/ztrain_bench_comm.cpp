// ztrain-bench-comm: collective bandwidth in the manner of nccl-tests, over ztrain's Comm
// interface. Run under mpirun: `mpirun -np N build/bin/ztrain-bench-comm [--backend mpi|nccl]
// [--min 1K] [--max 64M]` (mpi: host memory; nccl: device memory, one GPU per local rank, from
// the CUDA backend's plugin: the real one, or the emulated device's with its emulated NCCL, where
// the #wrong column is the check and the bandwidth means nothing).
// For each of all_reduce, reduce_scatter and all_gather and each size: warm-up, then timed
// iterations; prints time, algorithm bandwidth (bytes / time), bus bandwidth (all-reduce:
// x 2(n-1)/n; reduce-scatter, all-gather: x (n-1)/n) and a #wrong column from an exact check
// (small integers, so float sums are exact).
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/core/byte_size.h"
#include "engine/core/status.h"
#include "engine/comm/comm.h"
#include "engine/comm/topology.h"
#include "engine/backend/backend.h"
#ifdef ZTRAIN_HAVE_NCCL
#include "engine/comm/device_comms.h"
#endif

using namespace zt;

namespace {

constexpr const char* kUsage =
    "usage: mpirun -np N ztrain-bench-comm [--backend mpi|nccl] [--min 1K] [--max 64M] [--iters 20]";

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  dist_init(&argc, &argv);
  try {
    size_t min_bytes = 1024, max_bytes = 64u << 20;
    int iters = 20, warmup = 5;
    std::string backend = "mpi";
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) user_error("{} needs a value", a);
        return argv[++i];
      };
      if (a == "--min") min_bytes = size_t(parse_byte_size(value(), "--min"));
      else if (a == "--max") max_bytes = size_t(parse_byte_size(value(), "--max"));
      else if (a == "--iters") iters = int(parse_count(value(), "--iters", 1, 100000));
      else if (a == "--backend") backend = value();
      else if (a == "--help") {
        std::puts(kUsage);
        dist_finalize();
        return 0;
      } else user_error("unknown option {}", a);
    }
    if (backend != "mpi" && backend != "nccl") user_error("--backend must be mpi or nccl, got '{}'", backend);
    // sizes quadruple from --min to --max: the buffers of the largest are allocated twice per rank
    constexpr size_t kMaxBytes = size_t(8) << 30;
    if (min_bytes < sizeof(float) || min_bytes > max_bytes || max_bytes > kMaxBytes)
      user_error("--min {} and --max {}: expected 4 B <= --min <= --max <= 8 GiB", min_bytes,
                 max_bytes);
    Topology topo = make_topology(1, 600);
    Comm* comm_ptr = topo.world.get();
    std::unique_ptr<Comm> nccl;
    std::unique_ptr<Backend> gpu;  // the device memory of --backend nccl
    const bool device = backend == "nccl";
    if (device) {
#ifdef ZTRAIN_HAVE_NCCL
      try {
        gpu = make_backend(DeviceChoice::Cuda, 1, topo.local_rank);
      } catch (const std::exception& e) {
        if (topo.is_root()) std::printf("# SKIP: --backend nccl needs a CUDA device: %s\n", e.what());
        dist_finalize();
        return 0;
      }
      nccl = make_nccl_comm(MPI_COMM_WORLD, "world", 600, gpu->native_stream());
      comm_ptr = nccl.get();
#else
      user_error("--backend nccl: this build has no NCCL (configure with the CUDA toolkit)");
#endif
    }
    Comm& comm = *comm_ptr;
    const int n = comm.size(), r = comm.rank();
    if (r == 0) {
      std::printf("# ztrain-bench-comm: %d ranks, backend %s, float32, %d iterations after %d warm-up\n",
                  n, comm.name().c_str(), iters, warmup);
      std::printf("# %-15s %12s %12s %10s %10s %10s %7s\n", "op", "size(B)", "count", "time(us)",
                  "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    }
    for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"}) {
      for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
        // count = elements of the full (n-rank) buffer for reduce_scatter / all_gather
        const size_t per = std::max<size_t>(1, bytes / sizeof(float) / n);
        const size_t count = std::string(op) == "all_reduce" ? std::max<size_t>(1, bytes / sizeof(float)) : per * n;
        std::vector<float> send(count), recv(count);
        float* sp = send.data();  // the buffers the collectives see: host, or device for nccl
        float* rp = recv.data();
        if (gpu) {
          sp = static_cast<float*>(gpu->alloc(count * sizeof(float), MemTag::CommBuffers));
          rp = static_cast<float*>(gpu->alloc(count * sizeof(float), MemTag::CommBuffers));
        }
        auto fill = [&] {
          for (size_t i = 0; i < count; ++i) send[i] = float((i + size_t(r) * 7) % 13);
          if (gpu) gpu->copy_to_device(sp, send.data(), count * sizeof(float));
        };
        auto fetch = [&] {
          if (!gpu) return;
          gpu->copy_to_host(send.data(), sp, count * sizeof(float));
          gpu->copy_to_host(recv.data(), rp, count * sizeof(float));
        };
        auto run_once = [&] {
          if (std::string(op) == "all_reduce") comm.wait(comm.all_reduce(sp, count, ReduceOp::Sum));
          else if (std::string(op) == "reduce_scatter") comm.wait(comm.reduce_scatter(sp, rp, per));
          else comm.wait(comm.all_gather(sp + size_t(r) * per, rp, per));
          // NCCL's wait() only orders the device's compute stream: the time is the stream's
          if (gpu) gpu->synchronize();
        };
        for (int w = 0; w < warmup; ++w) {
          fill();
          run_once();
        }
        double t = 0;
        for (int it = 0; it < iters; ++it) {
          fill();
          comm.barrier();
          const auto t0 = std::chrono::steady_clock::now();
          run_once();
          t += seconds_since(t0);
        }
        t /= iters;
        comm.all_reduce_doubles(&t, 1);
        t /= n;  // mean over ranks
        // check the last iteration's result exactly
        fetch();
        if (gpu) {
          gpu->free(sp);
          gpu->free(rp);
        }
        double wrong = 0;
        for (size_t i = 0; i < (std::string(op) == "all_reduce" ? count : per); ++i) {
          if (std::string(op) == "all_reduce") {
            float expect = 0;
            for (int q = 0; q < n; ++q) expect += float((i + size_t(q) * 7) % 13);
            wrong += send[i] != expect;
          } else if (std::string(op) == "reduce_scatter") {
            const size_t g = size_t(r) * per + i;
            float expect = 0;
            for (int q = 0; q < n; ++q) expect += float((g + size_t(q) * 7) % 13);
            wrong += recv[i] != expect;
          }
        }
        if (std::string(op) == "all_gather")
          for (int q = 0; q < n; ++q)
            for (size_t i = 0; i < per; ++i)
              wrong += recv[size_t(q) * per + i] != float((size_t(q) * per + i + size_t(q) * 7) % 13);
        comm.all_reduce_doubles(&wrong, 1);
        const double data_bytes = double(count) * sizeof(float);
        const double algbw = data_bytes / t / 1e9;
        const double factor = std::string(op) == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
        if (r == 0)
          std::printf("  %-15s %12.0f %12zu %10.1f %10.3f %10.3f %7.0f\n", op, data_bytes, count, t * 1e6,
                      algbw, algbw * factor, wrong);
      }
    }
  } catch (const UserError& e) {  // bad arguments: the usage too
    std::fprintf(stderr, "ztrain-bench-comm: error: %s\n%s\n", e.what(), kUsage);
    dist_abort(2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ztrain-bench-comm: error: %s\n", e.what());
    dist_abort(1);
  }
  dist_finalize();
  return 0;
}
