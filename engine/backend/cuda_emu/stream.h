#pragma once
#include <functional>
#include <cuda_runtime.h>
namespace zt::emu {
// Runs `work` on stream s after everything enqueued on s before it, on the stream's own thread
// (asynchronously to the caller). `what` names the work in error messages.
void stream_enqueue(cudaStream_t s, const char* what, std::function<void()> work);
}
