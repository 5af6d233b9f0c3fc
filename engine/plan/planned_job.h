// The job and its step as the trainer builds and runs them (engine/job), on a PlanBackend: rank 0
// of a layout of `world` ranks, every collective a no-op of the right group size. What the plan
// (layout_plan.h), the start-up memory check and the GPU check's predicted peak count is therefore
// what trains. Needs nothing beyond the C++ standard library and fmt (the GPU check builds it).
#pragma once
#include <memory>

#include "engine/comm/topology.h"
#include "engine/config/spec.h"
#include "engine/job/job.h"
#include "engine/plan/plan_backend.h"

namespace zt {

// A group of `size` ranks seen from its rank 0 whose collectives move nothing: what a plan needs
// of a group is its shape (shard sizes, buffers), not its data; on a PlanBackend they go into its
// books (`stride`: the rank distance between members, for the links they cross). One rank: the
// backend's self group.
std::unique_ptr<Comm> make_shape_only_comm(int size, const char* name, Backend& be, int stride = 1);

class PlannedJob {
 public:
  // UserError for a layout that does not fit `world` or the batch, or a model the backend of
  // `kind` cannot run. `count_only`: the tiers keep their books without files (NVMe).
  PlannedJob(const RunSpec& spec, int world, DeviceKind kind);
  ~PlannedJob();
  // One training step (engine/job/step.h) on token ids that cover the vocabulary; the counting
  // backend computes no values, so the step's loss is taken as 0 and the step is applied.
  void step();

  PlanBackend& backend() { return be_; }
  Topology& topology() { return topo_; }
  Job& job() { return *job_; }

 private:
  PlanBackend be_;
  Topology topo_;
  std::unique_ptr<Job> job_;
};

}  // namespace zt
