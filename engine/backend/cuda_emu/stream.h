#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <cuda_runtime.h>
namespace zt::emu {
// Runs `work` on stream s after everything enqueued on s before it, on the stream's own thread
// (asynchronously to the caller). `what` names the work in error messages.
void stream_enqueue(cudaStream_t s, const char* what, std::function<void()> work);
// "" when [p, p + bytes) lies inside one device or pinned host allocation (memory a GPU's kernels
// can reach, as NCCL requires of its buffers), else what is wrong with it.
std::string device_reachable(const void* p, size_t bytes);
// The emulated NCCL counts its collectives from issue to end: cudaFree, cudaFreeHost and
// cudaHostAlloc while one is in flight are a device fault here (on a GPU they synchronize the
// device, which NCCL documents as able to deadlock the job, and stall it at best).
void collective_issued();
void collective_finished();
}
