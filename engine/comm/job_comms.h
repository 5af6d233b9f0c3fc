// The topology's groups made ready for a job: device communicators for a device backend
// (device_comms.h), the collective order check when the failure tests ask for it
// (collective_order.h) and the flight recorder's wrappers (flight_recorder.h), in the order they
// must wrap each other. Built once, by the trainer, before any collective of the job.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "engine/comm/collective_order.h"
#include "engine/comm/flight_recorder.h"
#include "engine/comm/topology.h"
#include "engine/core/run_choices.h"

namespace zt {

class Backend;

struct JobComms {
  std::shared_ptr<CollectiveOrder> order;  // null unless the order check is on
  std::shared_ptr<FlightRecorder> flight;  // null without a flight recorder
};

// `backend`: [comm] backend; `flight_entries` > 0 keeps a recorder
// writing into `out_dir` (multi-rank jobs only).
JobComms finish_communicators(Topology& topo, Backend& device, CommBackendChoice backend, double timeout_s,
                              size_t flight_entries, const std::string& out_dir);

}  // namespace zt
