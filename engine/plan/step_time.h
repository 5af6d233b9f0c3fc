// The predicted time of the planned step (layout_plan.h) on a machine: each op at a calibrated
// fraction of the GPU's peaks, one after another on the compute stream, and each collective the
// step issued on the link its group crosses (collective_cost.h), one after another on its group's
// communication stream (each NCCL communicator has its own: engine/comm/comm_nccl.cpp), started
// where the step issued it; the compute stream stalls where the step waited for one that had not
// finished. What overlaps is what the engine overlaps: the
// timeline is the real step's (PlanBackend's books), not a formula of the layout.
#pragma once
#include <string>
#include <vector>

#include "engine/plan/machine.h"
#include "engine/plan/plan_backend.h"

namespace zt {

// What fraction of the datasheet figures each kind of op reaches (a measurement: default from the
// H200 run of record, tools/gpu_check.sh -> bench/calibration/h200.json; --calibration FILE reads
// another such file).
struct Calibration {
  double gemm = 0;    // matrix products: of the bf16 dense peak
  // the attention kernels per measured shape: of the bf16 dense peak, forward and backward
  struct Attention {
    int head_size = 0, seq_len = 0;
    double forward = 0, backward = 0;
  };
  std::vector<Attention> attention;
  double memory = 0;  // memory-bound ops: of the HBM bandwidth
  double vector = 0;  // other arithmetic: of the fp32 peak
  std::string source;
  // The measured shape nearest head size `hs` and `T` tokens: the same head size if measured,
  // then the nearest T by ratio (attention's efficiency grows with T: a longer sequence than any
  // measured takes the longest's).
  Attention attention_at(int hs, int T) const;
};
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
  double exposed_s() const { return step_s - compute_s; }
};

StepTime price_step(const std::vector<PlanBackend::Op>& ops, const std::vector<PlanBackend::Collective>& collectives,
                    const MachineProfile& machine, const Calibration& cal);

}  // namespace zt
