// Every kernel launch of the backend goes through launch(kernel, grid, block, smem, stream,
// args...): on the GPU it is kernel<<<grid, block, smem, stream>>>(args...); on the emulated
// device (engine/backend/cuda_emu) the emulated <cuda_runtime.h> defines it, and the same call
// runs the kernel's threads as fibers.
#pragma once
#include <cuda_runtime.h>

#include <utility>

namespace zt::cuda {
#ifndef ZT_CUDA_EMULATED
template <typename... P, typename... A>
inline void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A&&... args) {
  kernel<<<grid, block, smem, s>>>(std::forward<A>(args)...);
}
#endif
}  // namespace zt::cuda
