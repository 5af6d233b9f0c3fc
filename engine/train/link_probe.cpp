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
#include "engine/core/status.h"
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

// Device buffers freed however the measurement ends.
struct DeviceBuffer {
  Backend* device;
  float* p = nullptr;
  DeviceBuffer(Backend* d, size_t floats) : device(d) {
    if (device) p = static_cast<float*>(device->alloc(floats * sizeof(float), MemTag::CommBuffers));
  }
  ~DeviceBuffer() {
    if (p) device->free(p);
  }
};

// The figures of the group of ranks `group` (owned: freed here); every rank of the world calls this
// at once with its own group, all groups the same size. A rank that cannot set up its communicator
// or buffers fails every rank's call together (a rank alone in a collective would wait forever).
Link measure_group(MPI_Comm group, const std::string& name, double timeout_s, Backend* device) {
  int n = 1;
  MPI_Comm_size(group, &n);
  std::unique_ptr<Comm> host = make_mpi_comm(group, name, timeout_s);  // owns `group`
  std::unique_ptr<Comm> nccl;
  std::unique_ptr<DeviceBuffer> da, db;
  // send and receive buffers of kLarge floats each, in the memory the step's collectives use
  std::vector<float> a_host(kLarge, 1.0f), b_host(kLarge);
  std::string failed;
  try {
    if (device) {
      nccl = make_nccl_comm(group, name, timeout_s, device->native_stream());
      da = std::make_unique<DeviceBuffer>(device, kLarge);
      db = std::make_unique<DeviceBuffer>(device, kLarge);
      device->copy_to_device(da->p, a_host.data(), kLarge * sizeof(float));
    }
  } catch (const std::exception& e) {
    failed = e.what();
  }
  int ok = failed.empty();
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!ok) throw RuntimeFailure(failed.empty() ? "another rank could not set up its collectives" : failed);
  Comm& comm = nccl ? *nccl : *host;
  const int r = comm.rank();
  float* a = device ? da->p : a_host.data();
  float* b = device ? db->p : b_host.data();
  auto done = [&](Comm::Handle h) {
    comm.wait(h);
    if (device) device->synchronize();  // NCCL's wait orders the device's stream: the time is the stream's
  };
  const size_t per = kLarge / size_t(n);  // a rank's share of the reduce-scatter's input, the all-gather's output
  const double t_small = best_seconds(comm, group, kSmallRuns, [&] { done(comm.all_reduce(a, kSmall, ReduceOp::Max)); });
  const double t_large = best_seconds(comm, group, kRuns, [&] { done(comm.all_reduce(a, kLarge, ReduceOp::Max)); });
  const double t_rs = best_seconds(comm, group, kRuns, [&] { done(comm.reduce_scatter(a, b, per)); });
  const double t_ag = best_seconds(comm, group, kRuns, [&] { done(comm.all_gather(b + size_t(r) * per, a, per)); });
  Link l = link_from_times(n, kSmall * sizeof(float), t_small, double(per * size_t(n)) * sizeof(float), t_large, t_rs,
                           t_ag);
  l.name = name;
  return l;
}

}  // namespace

Link link_from_times(int n, double small, double t_small, double large, double t_large, double t_reduce_scatter,
                     double t_all_gather) {
  Link l;
  if (n <= 1) return l;
  const double ar = bus_factor(CollectiveKind::AllReduce, n);
  const int ar_steps = collective_steps(CollectiveKind::AllReduce, n);
  // the all-reduce's bandwidth from the difference of the two sizes, its latency from what is left
  const double moving = t_large > t_small ? t_large - t_small : t_large / 2;
  const double bus = (large - small) * ar / moving;
  l.step_latency_s = std::max(0.0, t_small - small * ar / bus) / ar_steps;
  auto past_latency = [&](CollectiveKind kind, double t) {
    return std::max(t - collective_steps(kind, n) * l.step_latency_s, t / 2);
  };
  l.bytes_per_s = large * ar / past_latency(CollectiveKind::AllReduce, t_large);
  l.reduce_scatter_bytes_per_s =
      large * bus_factor(CollectiveKind::ReduceScatter, n) / past_latency(CollectiveKind::ReduceScatter, t_reduce_scatter);
  l.all_gather_bytes_per_s =
      large * bus_factor(CollectiveKind::AllGather, n) / past_latency(CollectiveKind::AllGather, t_all_gather);
  return l;
}

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
  out.most_on_one = most;
  out.on_device = device != nullptr;
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
