// measure_links (see link_probe.h).
#include "engine/train/link_probe.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "engine/backend/backend.h"
#include "engine/comm/comm_mpi.h"
#include "engine/comm/device_comms.h"
#include "engine/plan/collective_cost.h"

namespace zt {

namespace {

constexpr size_t kLarge = size_t(4) << 20;  // floats: 16 MiB, a gradient bucket's or a layer's gather
constexpr size_t kSmall = 1024;             // floats: 4 KiB, where the latency is the time
constexpr int kRuns = 3, kSmallRuns = 10;

// Seconds of the fastest of `runs` calls of `op` (after one to warm up), each the slowest rank's of
// the group; then the slowest group's, over the world (every rank calls this at once).
template <class Op>
double best_seconds(Comm& comm, MPI_Comm group, int runs, Op op) {
  op();
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < runs; ++i) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    op();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, group);
    best = std::min(best, s);
  }
  MPI_Allreduce(MPI_IN_PLACE, &best, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return best;
}

// The figures of the group of ranks `group` (owned: freed here); every rank of the world calls this
// at once with its own group, all groups the same size.
Link measure_group(MPI_Comm group, const std::string& name, double timeout_s, Backend* device) {
  int n = 1;
  MPI_Comm_size(group, &n);
  std::unique_ptr<Comm> host = make_mpi_comm(group, name, timeout_s);  // owns `group`
  std::unique_ptr<Comm> nccl;
  if (device) nccl = make_nccl_comm(group, name, timeout_s, device->native_stream());
  Comm& comm = nccl ? *nccl : *host;
  const int r = comm.rank();
  // send and receive buffers of kLarge floats each, in the memory the step's collectives use
  std::vector<float> a_host(kLarge, 1.0f), b_host(kLarge);
  float* a = a_host.data();
  float* b = b_host.data();
  if (device) {
    a = static_cast<float*>(device->alloc(kLarge * sizeof(float), MemTag::CommBuffers));
    b = static_cast<float*>(device->alloc(kLarge * sizeof(float), MemTag::CommBuffers));
    device->copy_to_device(a, a_host.data(), kLarge * sizeof(float));
  }
  auto done = [&](Comm::Handle h) {
    comm.wait(h);
    if (device) device->synchronize();  // NCCL's wait orders the device's stream: the time is the stream's
  };
  const size_t per = kLarge / size_t(n);  // a rank's share of the reduce-scatter's input, the all-gather's output
  const double small = best_seconds(comm, group, kSmallRuns, [&] { done(comm.all_reduce(a, kSmall, ReduceOp::Max)); });
  const double all_reduce = best_seconds(comm, group, kRuns, [&] { done(comm.all_reduce(a, kLarge, ReduceOp::Max)); });
  const double reduce_scatter = best_seconds(comm, group, kRuns, [&] { done(comm.reduce_scatter(a, b, per)); });
  const double all_gather =
      best_seconds(comm, group, kRuns, [&] { done(comm.all_gather(b + size_t(r) * per, a, per)); });
  if (device) {
    device->free(a);
    device->free(b);
  }
  // nccl-tests' bus bandwidth (collective_cost.h) of the time past the latency of its steps
  Link l;
  l.name = name;
  l.step_latency_s = small / collective_steps(CollectiveKind::AllReduce, n);
  auto bus = [&](CollectiveKind kind, double s, size_t floats) {
    const double moving = std::max(s - collective_steps(kind, n) * l.step_latency_s, s / 2);
    return double(floats) * sizeof(float) * bus_factor(kind, n) / moving;
  };
  l.bytes_per_s = bus(CollectiveKind::AllReduce, all_reduce, kLarge);
  l.reduce_scatter_bytes_per_s = bus(CollectiveKind::ReduceScatter, reduce_scatter, per * size_t(n));
  l.all_gather_bytes_per_s = bus(CollectiveKind::AllGather, all_gather, per * size_t(n));
  return l;
}

}  // namespace

MeasuredLinks measure_links(double timeout_s, Backend* device) {
  MeasuredLinks out;
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local = 0, local_size = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &local_size);
  int least = local_size, most = local_size, leaders = local == 0;
  MPI_Allreduce(MPI_IN_PLACE, &least, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &leaders, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  out.machines = leaders;
  out.per_machine = least == most ? local_size : 0;
  MPI_Comm world_dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &world_dup);
  out.world = measure_group(world_dup, fmt::format("the job's {} ranks", world), timeout_s, device);
  // inside and across machines apart: only where every machine holds the same number of ranks, so
  // that every group runs at once and is alike (on one machine, or one rank a machine, the world is
  // that group)
  if (out.per_machine > 1 && out.machines == 1) out.intra = out.world;
  if (out.per_machine == 1 && out.machines > 1) out.network = out.world;
  if (out.per_machine > 1 && out.machines > 1) {
    out.intra = measure_group(node, fmt::format("inside a machine, {} ranks", local_size), timeout_s, device);
    node = MPI_COMM_NULL;
    MPI_Comm across;
    MPI_Comm_split(MPI_COMM_WORLD, local, rank, &across);
    out.network = measure_group(across, fmt::format("across {} machines, {} groups at once", out.machines, local_size),
                                timeout_s, device);
  }
  if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
  return out;
}

std::string link_figures(const Link& l) {
  return fmt::format("all-reduce {:.3g}, reduce-scatter {:.3g}, all-gather {:.3g} GB/s bus; {:.3g} us a step",
                     l.bytes_per_s / 1e9, link_bus_bandwidth(l, CollectiveKind::ReduceScatter) / 1e9,
                     link_bus_bandwidth(l, CollectiveKind::AllGather) / 1e9, l.step_latency_s * 1e6);
}

}  // namespace zt
