// The predicted time of the planned step (layout_plan.h) on a machine: each op at a calibrated
// fraction of the GPU's peaks, one after another on the compute stream, and each collective the
// step issued on the link its group crosses (collective_cost.h), one after another on its group's
// communication stream (each NCCL communicator has its own: engine/comm/comm_nccl.cpp), started
// where the step issued it; the compute stream stalls where the step waited for one that had not
// finished. What overlaps is what the engine overlaps: the
// timeline is the real step's (PlanBackend's books), not a formula of the layout.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "engine/plan/machine.h"
#include "engine/plan/plan_backend.h"

namespace zt {

// The H200 run of record's efficiencies (Calibration: machine.h).
Calibration default_calibration();

struct StepTime {
  double compute_s = 0;  // the ops alone
  double comm_s = 0;     // the collectives alone, each on its link
  double step_s = 0;     // both, overlapped as the step waits
  // The compute stream's stalls, largest first: which collective (kind, group, link) and seconds.
  struct Stall {
    std::string what;
    double seconds = 0;
  };
  std::vector<Stall> stalls;
  // The compute by kind of op: matrix products, attention kernels and the rest (norms,
  // activations, casts, the optimizer: memory-bound on a GPU), each its seconds, FLOPs and the
  // bytes its ops move through device memory.
  struct Kind {
    double seconds = 0, flops = 0, bytes = 0;
  };
  Kind gemm, attention, other;
  // Each communicator group's collectives ("tp", "dp", "world"...): their seconds on the link (and
  // by kind: "all-gather", ...), and how long the compute stream stalled for them (the rest hid
  // behind compute).
  struct Group {
    double seconds = 0, stalled = 0;
    std::map<std::string, double> kind_seconds;
  };
  std::map<std::string, Group> groups;
  double exposed_s() const { return step_s - compute_s; }
};

// `async`: collectives progress on their own while compute goes on (NCCL's streams); false for
// MPI on host buffers (the CPU backend), whose non-blocking collectives move their data only
// inside the wait (no progress thread), so each one starts when the step waits for it.
StepTime price_step(const std::vector<PlanBackend::Op>& ops, const std::vector<PlanBackend::Collective>& collectives,
                    const MachineProfile& machine, const Calibration& cal, bool async = true);

}  // namespace zt
