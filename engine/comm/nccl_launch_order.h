// One order for the collectives of several NCCL communicators on one GPU (the tensor-, data- and
// replica-parallel groups, each on a stream of its own). NCCL's kernels of two communicators can
// wait on each other across ranks: where one rank's GPU runs group A's collective first and
// another's runs group B's first, both spin forever (NCCL's user guide, "Using multiple NCCL
// communicators concurrently"). ztrain launches every collective from one host thread, in program
// order, the same on every rank; what must follow is the GPU keeping that order:
// - NCCL 2.26 and later keep the host's launch order across communicators when
//   NCCL_LAUNCH_ORDER_IMPLICIT=1 (its default is 0), letting the kernels overlap on CUDA 12.3+:
//   set here before the first communicator's init unless the user set it;
// - with an older NCCL, or NCCL_LAUNCH_ORDER_IMPLICIT=0 set by the user, ztrain orders them itself:
//   each collective's stream waits on the device for the previous collective of any other
//   communicator to end (one at a time across groups; said once at start).
// ZTRAIN_FAULT_NCCL_UNORDERED=1 (a test hook) does neither: the planted bug the emulated NCCL's
// order check must catch (tests/cuda_emu/nccl_launch_order.py).
#pragma once
#include <cuda_runtime_api.h>

#include <string>

namespace zt::nccl_order {

enum class Mode { Implicit, Serial, Unordered };

// Chosen once per process, before its first communicator init; `said` is the sentence the start
// prints when the mode is not Implicit (empty otherwise).
struct Choice {
  Mode mode;
  int nccl_version;
  std::string said;
};
const Choice& establish();

// Around each launch (a collective, or a group's at its ncclGroupEnd) on `stream` of communicator
// `comm`: in the Serial mode the stream first waits for the previous collective of another
// communicator, and the launch's end is recorded for the next. Nothing in the other modes.
void before_launch(cudaStream_t stream, const void* comm);
void after_launch(cudaStream_t stream, const void* comm);

}  // namespace zt::nccl_order
