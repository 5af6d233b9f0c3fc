// Kernel launches on the emulated device: zt::cuda::launch(kernel, grid, block, smem, stream,
// args...) is what `kernel<<<grid, block, smem, stream>>>(args...)` is on the GPU
// (engine/backend/cuda/launch.cuh). The launch is validated at once (limits of the device, the
// kernel's shared-memory attribute) and runs later on the stream, each thread a fiber with its
// own copy of the arguments.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>

#include "engine/backend/cuda_emu/simt.h"

struct CUstream_st;

namespace zt::emu {

// Dynamic shared memory (`extern __shared__ T name[]`): a thread-local array per name and
// translation unit, as large as the opt-in limit; the launch says which ones its kernel may use.
constexpr size_t kMaxDynamicShared = 232448;  // 227 KB: sharedMemPerBlockOptin of an H100/H200
struct DynamicShared {
  void* arrays[2];
  size_t bytes;  // of each array
};
struct LaunchRequest {
  const void* kernel;  // for its name and its attributes
  dim3 grid, block;
  size_t dynamic_shared;
  CUstream_st* stream;
  DynamicShared arrays;
};
// Validates and enqueues; `body` runs one thread (called once per thread, in its fiber). Errors
// become the launch's cudaGetLastError.
void launch_kernel(const LaunchRequest& r, std::function<void()> body);
// Registers a translation unit's dynamic shared arrays at load time (they are left out of the
// poisoning of static shared memory, and poisoned per launch by how much the launch asked for).
struct RegisterDynamicShared {
  explicit RegisterDynamicShared(DynamicShared a);
};

}  // namespace zt::emu

#ifdef ZT_EMU_KERNEL_MODULE
namespace zt::cuda {
namespace {
// the names the kernels give their dynamic shared memory
[[maybe_unused]] thread_local __attribute__((aligned(128))) unsigned char smem[zt::emu::kMaxDynamicShared];
[[maybe_unused]] thread_local __attribute__((aligned(128))) float sm[zt::emu::kMaxDynamicShared / sizeof(float)];
const zt::emu::RegisterDynamicShared zt_emu_dynamic_shared{{{smem, sm}, zt::emu::kMaxDynamicShared}};

template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem_bytes, CUstream_st* s, A&&... args) {
  using Args = std::tuple<std::decay_t<P>...>;
  auto shared_args = std::make_shared<const Args>(std::forward<A>(args)...);
  const zt::emu::LaunchRequest r{reinterpret_cast<const void*>(kernel), grid, block, smem_bytes, s,
                                 {{smem, sm}, zt::emu::kMaxDynamicShared}};
  zt::emu::launch_kernel(r, [kernel, shared_args] {
    Args mine = *shared_args;  // parameters are per thread, as the GPU's are
    std::apply(kernel, mine);
  });
}
}  // namespace
}  // namespace zt::cuda
#endif
