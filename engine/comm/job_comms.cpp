// The job's communicators (see job_comms.h).
#include "engine/comm/job_comms.h"

#include "engine/comm/device_comms.h"
#include "engine/core/faults.h"

namespace zt {

JobComms finish_communicators(Topology& topo, Backend& device, CommBackendChoice backend, double timeout_s,
                              size_t flight_entries, const std::string& out_dir) {
  JobComms out;
  attach_device_comms(topo, backend, device, timeout_s);
  if ((faults().check_collective_order || faults().swap_collectives.rank >= 0) && topo.world_size > 1) {
    out.order = std::make_shared<CollectiveOrder>(*topo.world, topo.world_rank);
    if (topo.tp > 1) topo.tp_group = make_order_checked_comm(std::move(topo.tp_group), "tp", out.order);
    if (topo.dp > 1) topo.dp_group = make_order_checked_comm(std::move(topo.dp_group), "dp", out.order);
    if (topo.shard_group && topo.shard_size() > 1)
      topo.shard_group = make_order_checked_comm(std::move(topo.shard_group), "shard", out.order);
    if (topo.replica_group)
      topo.replica_group = make_order_checked_comm(std::move(topo.replica_group), "replica", out.order);
  }
  if (flight_entries > 0 && topo.world_size > 1) {  // no collective: make_topology made its parts
    out.flight = make_flight_recorder(topo, out_dir, flight_entries);
    topo.world = make_flight_recorded_comm(std::move(topo.world), "world", *out.flight);
    if (topo.tp > 1) topo.tp_group = make_flight_recorded_comm(std::move(topo.tp_group), "tp", *out.flight);
    if (topo.dp > 1) topo.dp_group = make_flight_recorded_comm(std::move(topo.dp_group), "dp", *out.flight);
    if (topo.shard_group && topo.shard_size() > 1)
      topo.shard_group = make_flight_recorded_comm(std::move(topo.shard_group), "shard", *out.flight);
    if (topo.replica_group)
      topo.replica_group = make_flight_recorded_comm(std::move(topo.replica_group), "replica", *out.flight);
  }
  return out;
}

}  // namespace zt
