// The emulated device's SIMT side as the kernels see it (engine/backend/cuda_emu/simt.cpp runs
// it): every thread of a block is a fiber; blocks run one at a time per worker thread; barriers
// and warp-synchronous operations suspend a fiber until the threads they wait for arrive.
#pragma once
#include <cstddef>
#include <cstdint>

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

namespace zt::emu {

// What a running thread reads as threadIdx, blockIdx, blockDim, gridDim (first member of the
// scheduler's per-thread state).
struct ThreadView {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
};
// The thread the calling fiber runs; null outside kernels. Exported by the runtime library.
extern thread_local ThreadView* current_thread;

void syncthreads();
void syncwarp(unsigned mask);
// A warp-synchronous operation: every lane of `mask` calls it with the same `what` and mask,
// passing a pointer to its own slot; the last to arrive calls complete(slots) where slots[l] is
// lane l's slot (null outside the mask), then all of them go on. Errors (a lane outside its own
// mask, lanes that disagree, a lane of the mask that exited or waits elsewhere) stop the kernel
// with a message naming it, the block and the lanes.
using WarpComplete = void (*)(void* const* slots, unsigned mask);
void warp_collective(const char* what, unsigned mask, void* slot, WarpComplete complete);
int lane_id();
// Stops the running kernel with `message` (the block's other threads are abandoned, the launch
// fails and the stream's error is sticky, as a device fault).
[[noreturn]] void kernel_fault(const char* message);
// True when p lies in this thread's shared memory (the kernel module's thread-local block).
bool is_shared(const void* p, size_t bytes);

}  // namespace zt::emu
