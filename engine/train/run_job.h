// The run's job on this machine: the backend (with its memory limits), the communicators finished
// for it (engine/comm/job_comms.h), the memory check before anything large is allocated, and the
// job (engine/job/job.h) with its parameters initialized from [run] seed. The trainer builds it;
// the planner builds the same Job on its counting backend (engine/plan/layout_plan.cpp).
#pragma once
#include <memory>

#include "engine/backend/backend.h"
#include "engine/comm/job_comms.h"
#include "engine/comm/topology.h"
#include "engine/config/spec.h"
#include "engine/job/job.h"

namespace zt {

// Destroyed in reverse: the job before the communicators' checks and the backend.
struct RunJob {
  std::unique_ptr<Backend> backend;
  JobComms comms;  // the order check and the flight recorder, when on
  std::unique_ptr<Job> job;
  // rank 0 on a GPU ztrain has a machine profile of: the planner's step time for this layout on
  // it (engine/plan/step_time.h), to print beside the measured one; 0 otherwise
  double predicted_step_ms = 0;
  std::string predicted_on;  // the profile's name
};

// Builds into `out` as far as it gets (what was built is destroyed in order when it throws):
// UserError (exit 2) for a spec this machine cannot run (a layout that does not fit the world
// size or the batch, an op the backend lacks, memory that does not fit, no room for NVMe files).
// Collective over the world: ranks agree on the outcome of the checks that may fail on one.
void build_run_job(const RunSpec& spec, Topology& topo, RunJob& out);

}  // namespace zt
