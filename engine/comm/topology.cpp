// Launch detection, MPI lifetime, and the one place where process groups are made.
#include "engine/comm/topology.h"

#include "engine/comm/deadline.h"
#include "engine/comm/startup_watchdog.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <unistd.h>

#include "engine/core/status.h"
#include "engine/comm/comm_mpi.h"

namespace zt {

namespace {
bool g_mpi = false;
DistPhase g_phase = DistPhase::Setup;

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}
// A start-up step that must end within `timeout_s` (engine/comm/deadline.h): _Exit from the
// deadline's thread; mpirun sees a rank end without MPI_Finalize and ends the others.
void end_if_stuck(const char* what, double timeout_s) {
  std::fprintf(stderr, "ztrain: failure: rank %d: start-up step '%s' did not finish within %g s "
               "([comm] timeout_s): another rank is stuck or gone; ending the job\n",
               dist_world_rank(), what, timeout_s);
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace

void dist_init(int* argc, char*** argv, const std::function<double()>& startup_timeout_s) {
  if (!launched_by_mpi()) return;
  // The emulated NCCL (engine/backend/cuda_emu/nccl.cpp) runs MPI on the emulated streams'
  // threads; everything else calls MPI from the main thread only.
  const char* nccl = std::getenv("ZTRAIN_NCCL_PLUGIN");
  const bool emulated_nccl = nccl && std::strstr(nccl, "nccl_emu");
  int provided = 0;
  {
    const StartupWatchdog watchdog(startup_timeout_s ? startup_timeout_s() : 300);  // a rank that never arrives is named
    MPI_Init_thread(argc, argv, emulated_nccl ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED, &provided);
  }
  g_mpi = true;
}

void dist_finalize() {
  if (!g_mpi) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

bool dist_active() {
  if (!g_mpi) return false;
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n > 1;
}

int dist_world_rank() {
  if (!g_mpi) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

void dist_set_phase(DistPhase phase) { g_phase = phase; }
DistPhase dist_phase() { return g_phase; }

void dist_abort(int code) {
  if (dist_active()) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

std::unique_ptr<Comm> make_world_comm(double timeout_s) {
  if (!g_mpi) return make_self_comm("world");
  return make_mpi_comm(MPI_COMM_WORLD, "world", timeout_s);
}

Topology make_topology(int tensor, double timeout_s, int replicate) {
  Topology t;
  const Deadline deadline(timeout_s, [timeout_s] { end_if_stuck("make process groups", timeout_s); });
  if (g_mpi) {
    MPI_Comm_size(MPI_COMM_WORLD, &t.world_size);
    MPI_Comm_rank(MPI_COMM_WORLD, &t.world_rank);
    MPI_Comm node;  // ranks sharing a machine, for the local rank (device index)
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, t.world_rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &t.local_rank);
    MPI_Comm_size(node, &t.local_size);
    MPI_Comm_free(&node);
  }
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  if (g_mpi) {
    std::vector<char> all(size_t(t.world_size) * sizeof host);
    MPI_Allgather(host, sizeof host, MPI_CHAR, all.data(), sizeof host, MPI_CHAR, MPI_COMM_WORLD);
    for (int r = 0; r < t.world_size; ++r) t.hosts.emplace_back(all.data() + size_t(r) * sizeof host);
  } else {
    t.hosts.emplace_back(host);
  }
  if (tensor < 1 || t.world_size % tensor != 0)
    user_error("[parallel] tensor = {} does not divide the world size {} (ranks launched by mpirun)",
               tensor, t.world_size);
  t.tp = tensor;
  t.dp = t.world_size / tensor;
  t.tp_rank = t.world_rank % tensor;  // tensor-parallel ranks are consecutive
  t.dp_rank = t.world_rank / tensor;
  if (replicate < 1 || t.dp % replicate != 0)
    user_error("[parallel] replicate = {} does not divide the data-parallel degree {} (world {} / tensor {})",
               replicate, t.dp, t.world_size, tensor);
  t.replicas = replicate;
  if (!g_mpi || t.world_size == 1) {
    t.world = make_self_comm("world");
    t.tp_group = make_self_comm("tp");
    t.dp_group = make_self_comm("dp");
    return t;
  }
  MPI_Comm tp_comm, dp_comm;
  MPI_Comm_split(MPI_COMM_WORLD, t.dp_rank, t.tp_rank, &tp_comm);
  MPI_Comm_split(MPI_COMM_WORLD, t.tp_rank, t.dp_rank, &dp_comm);
  t.world = make_mpi_comm(MPI_COMM_WORLD, "world", timeout_s);
  t.tp_group = t.tp > 1 ? make_mpi_comm(tp_comm, "tp", timeout_s) : make_self_comm("tp");
  t.dp_group = t.dp > 1 ? make_mpi_comm(dp_comm, "dp", timeout_s) : make_self_comm("dp");
  t.mpi_world = MPI_COMM_WORLD;
  auto* side = new MPI_Comm;
  MPI_Comm_dup(MPI_COMM_WORLD, side);
  t.mpi_side = std::shared_ptr<void>(side, [](void* c) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(static_cast<MPI_Comm*>(c));
    delete static_cast<MPI_Comm*>(c);
  });
  t.mpi_tp = t.tp > 1 ? tp_comm : nullptr;  // owned by the MpiComm above
  t.mpi_dp = t.dp > 1 ? dp_comm : nullptr;
  if (t.tp == 1) MPI_Comm_free(&tp_comm);
  if (t.dp == 1) MPI_Comm_free(&dp_comm);
  if (t.replicas > 1) {
    // shard: this replica's ranks of this tensor rank; replica: this shard index's in every replica
    const int S = t.shard_size();
    MPI_Comm shard_comm, replica_comm;
    MPI_Comm_split(MPI_COMM_WORLD, t.replica_rank() * t.tp + t.tp_rank, t.shard_rank(), &shard_comm);
    MPI_Comm_split(MPI_COMM_WORLD, t.shard_rank() * t.tp + t.tp_rank, t.replica_rank(), &replica_comm);
    t.shard_group = S > 1 ? make_mpi_comm(shard_comm, "shard", timeout_s) : make_self_comm("shard");
    t.replica_group = make_mpi_comm(replica_comm, "replica", timeout_s);
    t.mpi_shard = S > 1 ? shard_comm : nullptr;
    t.mpi_replica = replica_comm;
    if (S == 1) MPI_Comm_free(&shard_comm);
  }
  return t;
}

}  // namespace zt
