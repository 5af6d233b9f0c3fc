// NCCL (a plugin) or host-staged MPI communicators for device buffers (see device_comms.h).
#include "engine/comm/device_comms.h"

#include <vector>

#include "engine/backend/backend.h"
#include "engine/comm/comm_staged.h"
#include "engine/core/plugin.h"
#include "engine/core/status.h"

namespace zt {

std::unique_ptr<Comm> make_nccl_comm(void* mpi_comm, const std::string& name, double timeout_s, void* stream) {
  Plugin& p = load_plugin("libztrain_nccl.so", "ZTRAIN_NCCL_PLUGIN");
  using Make = Comm* (*)(void*, const char*, double, void*, char*, size_t);
  auto make = reinterpret_cast<Make>(p.symbol("zt_make_nccl_comm"));
  if (!make) throw RuntimeFailure("NCCL plugin unavailable: " + p.error);
  char err[512] = {0};
  Comm* c = make(mpi_comm, name.c_str(), timeout_s, stream, err, sizeof err);
  if (!c) throw RuntimeFailure(std::string("NCCL communicator: ") + err);
  return std::unique_ptr<Comm>(c);
}

void attach_device_comms(Topology& t, CommBackendChoice backend, Backend& device, double timeout_s) {
  // A group of one copies between the backend's buffers (ZeRO's shards of a single data-parallel
  // rank): with the backend's copy, never a host memmove of device pointers.
  if (t.tp == 1) t.tp_group = make_device_self_comm("tp", device);
  if (t.dp == 1) t.dp_group = make_device_self_comm("dp", device);
  if (t.shard_group && t.shard_size() == 1) t.shard_group = make_device_self_comm("shard", device);
  // the groups over several ranks, with the MPI communicators behind them
  struct Group {
    std::unique_ptr<Comm>& comm;
    void*& mpi;
    const char* name;
  };
  std::vector<Group> groups;
  if (t.tp > 1) groups.push_back({t.tp_group, t.mpi_tp, "tp"});
  if (t.dp > 1) groups.push_back({t.dp_group, t.mpi_dp, "dp"});
  if (t.shard_group && t.shard_size() > 1) groups.push_back({t.shard_group, t.mpi_shard, "shard"});
  if (t.replica_group) groups.push_back({t.replica_group, t.mpi_replica, "replica"});
  if (device.kind() == DeviceKind::CPU) {
    // the MPI communicator is the one sanctioned host access to the CPU backend's memory
    if (t.world_size > 1) {
      t.world = make_host_access_comm(std::move(t.world), device);
      for (Group& g : groups) g.comm = make_host_access_comm(std::move(g.comm), device);
    }
    return;
  }
  if (t.world_size == 1) return;
#ifdef ZTRAIN_HAVE_NCCL
  if (backend != CommBackendChoice::Mpi) {
    void* stream = device.native_stream();
    // All-reduces of host doubles (loss, norms) stay on MPI's world communicator: cheap and
    // independent of device memory. Device buffers go over NCCL.
    // (The MPI communicator only bootstraps NCCL's unique id; the MpiComm that owns it goes.)
    for (Group& g : groups) {
      g.comm = make_nccl_comm(g.mpi, g.name, timeout_s, stream);
      g.mpi = nullptr;
    }
    return;
  }
#else
  if (backend == CommBackendChoice::Nccl) user_error("[comm] backend = \"nccl\": this ztrain was built without NCCL");
#endif
  // mpi (or no NCCL): host-staged MPI for the device buffers
  for (Group& g : groups) g.comm = make_host_staged_comm(std::move(g.comm), device);
}

}  // namespace zt
