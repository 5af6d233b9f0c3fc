// The process layout: world -> tensor-parallel groups of T consecutive ranks (inside one machine
// when T <= GPUs per machine) x data-parallel groups of the ranks with equal tp_rank. Hybrid
// sharding splits each data-parallel group of D ranks into R replicas of S = D / R consecutive
// data-parallel ranks: ZeRO shards over a replica (the shard group) and the ranks holding the same
// shard in every replica (the replica group) all-reduce it. Every process group is created here,
// once; everything else receives the groups it needs.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/comm.h"

namespace zt {

struct Topology {
  int world_size = 1, world_rank = 0, local_rank = 0, local_size = 1;  // local: ranks on this machine
  int tp = 1, dp = 1, tp_rank = 0, dp_rank = 0;
  int replicas = 1;  // R: 1 = ZeRO shards over the whole data-parallel group
  std::unique_ptr<Comm> world, tp_group, dp_group;
  // With R > 1: the replica's S ranks (stride T) and the R ranks of one shard index (stride T x S);
  // null with R = 1 (ZeRO's group is then dp_group).
  std::unique_ptr<Comm> shard_group, replica_group;
  bool is_root() const { return world_rank == 0; }
  // What ZeRO shards over: S ranks (D without replicas), this rank's part and replica.
  int shard_size() const { return dp / replicas; }
  int shard_rank() const { return dp_rank % shard_size(); }
  int replica_rank() const { return dp_rank / shard_size(); }
  Comm& zero_group() const { return shard_group ? *shard_group : *dp_group; }
  // The MPI communicators behind the groups (MPI_Comm as void*; null without MPI), so that
  // device communicators can be built over the same ranks.
  void* mpi_world = nullptr;
  void* mpi_tp = nullptr;
  void* mpi_dp = nullptr;
  void* mpi_shard = nullptr;
  void* mpi_replica = nullptr;
  // A duplicate of the world for the flight recorder's questions (owned by the Topology), and
  // each world rank's host name: made here, where every rank is, so that nothing later must
  // wait for all ranks to build them.
  std::shared_ptr<void> mpi_side;
  std::vector<std::string> hosts;
  std::string host_of(int world_rank) const {
    return world_rank >= 0 && size_t(world_rank) < hosts.size() ? hosts[size_t(world_rank)] : "?";
  }
};

// Starts MPI when the process was launched by an MPI launcher (mpirun/srun); otherwise ztrain is
// a single process and MPI is never touched. MPI_Init is bounded by startup_timeout_s() (asked
// only under a launcher): a rank that never arrives ends the job, named (startup_watchdog.h).
void dist_init(int* argc, char*** argv, const std::function<double()>& startup_timeout_s = {});
void dist_finalize();
bool dist_active();  // MPI initialized with more than one rank
int dist_world_rank();
// Where the job is, for error handling: in Setup (reading the spec) every rank sees the same
// errors; in Startup ranks agree on failures before training; in Running a failure must abort.
enum class DistPhase { Setup, Startup, Running };
void dist_set_phase(DistPhase phase);
DistPhase dist_phase();
// Ends every rank of the job with `code` (MPI_Abort when multi-rank, else exit).
[[noreturn]] void dist_abort(int code);

// The world group alone, before the topology exists (start-up agreement): MPI_COMM_WORLD with
// `timeout_s`, or a group of one without MPI.
std::unique_ptr<Comm> make_world_comm(double timeout_s);

// Builds the groups. UserError (exit 2) when `tensor` does not divide the world size, or
// `replicate` the data-parallel degree. MPI's communicator splits block with no timeout of their
// own: a rank that has not finished them within `timeout_s` prints why and exits, which ends the
// job (never a silent hang).
Topology make_topology(int tensor, double timeout_s, int replicate = 1);

}  // namespace zt
