// The CUDA runtime on the emulated device (engine/backend/cuda_emu): stands in for the toolkit's
// cuda_runtime.h when the backend's .cu files are compiled as C++ by the host compiler. The
// runtime calls keep the toolkit's signatures and documented semantics (runtime.cpp); the device
// side (qualifiers, threadIdx, barriers, shuffles, atomics) maps onto the fiber scheduler
// (simt.h). Never included by the real CUDA build.
#pragma once
#include <algorithm>
#include <atomic>
#include <cmath>
#include <math.h>  // the C library's expf, exp2f, fmaxf ... in the global namespace, as device code names them
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "engine/backend/cuda_emu/half.h"
#include "engine/backend/cuda_emu/simt.h"

#define ZT_CUDA_EMULATED 1

// ---- qualifiers: device code is host code here. __shared__ variables are thread-local: the
// threads of a block are fibers of one worker thread, and a worker runs one block at a time, so
// a thread_local is exactly one block's copy (poisoned by the scheduler at every block start).
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ thread_local
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict
#define __constant__

// ---- vector types the kernels use (vector_types.h: aligned to their size, so a load of one is
// one aligned access)
struct alignas(8) float2 {
  float x, y;
};

// ---- types and constants of the runtime API subset the backend uses
struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaDeviceAttr {
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};
constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0, cudaEventBlockingSync = 1, cudaEventDisableTiming = 2;
constexpr unsigned cudaHostAllocDefault = 0, cudaHostAllocPortable = 1, cudaHostAllocMapped = 2;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major, minor;
  int multiProcessorCount;
  size_t sharedMemPerBlockOptin;
  size_t sharedMemPerMultiprocessor;
  int regsPerMultiprocessor;
  int maxThreadsPerMultiProcessor;
  int l2CacheSize;
  int memoryBusWidth;
  int pciBusID, pciDeviceID, pciDomainID;
};

// ---- the runtime API (runtime.cpp)
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d);
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d);
cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int d);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMalloc(void** p, size_t bytes);
template <typename T>
inline cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t n);
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t s = nullptr);
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);
cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value);
template <typename R, typename... P>
inline cudaError_t cudaFuncSetAttribute(R (*kernel)(P...), cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

// ---- built-in variables and device functions
#define threadIdx (::zt::emu::current_thread->thread_idx)
#define blockIdx (::zt::emu::current_thread->block_idx)
#define blockDim (::zt::emu::current_thread->block_dim)
#define gridDim (::zt::emu::current_thread->grid_dim)
constexpr int warpSize = 32;

inline void __syncthreads() { zt::emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { zt::emu::syncwarp(mask); }

namespace zt::emu {
// __shfl*_sync: a value of up to 8 bytes from another lane of the mask (CUDA C++ Programming
// Guide, "Warp Shuffle Functions": width, a power of two <= 32, splits the warp into segments;
// down and up past the segment's end give the caller's own value; xor may read an earlier
// segment, a later one gives the caller's own value). A source lane outside the mask gives an
// undefined result on the GPU: poison (0xFF bytes) here, so code that relies on it shows.
enum class Shfl { Idx, Xor, Down, Up };
template <typename T>
struct ShflSlot {
  T in, out;
  int arg, width;
  Shfl kind;
};
template <typename T>
void shfl_complete(void* const* slots, unsigned mask) {
  for (int lane = 0; lane < 32; ++lane) {
    auto* me = static_cast<ShflSlot<T>*>(slots[lane]);
    if (!me) continue;
    const int w = me->width, seg = lane & ~(w - 1);
    int src = lane;
    switch (me->kind) {
      case Shfl::Idx: src = seg + (me->arg & (w - 1)); break;
      case Shfl::Xor: src = lane ^ me->arg; break;
      case Shfl::Down: src = (lane - seg) + me->arg < w ? lane + me->arg : lane; break;
      case Shfl::Up: src = (lane - seg) - me->arg >= 0 ? lane - me->arg : lane; break;
    }
    if (src < 0 || src > 31 || (me->kind == Shfl::Xor ? (src & ~(w - 1)) > seg : (src & ~(w - 1)) != seg))
      src = lane;
    if (!((mask >> src) & 1)) {
      std::memset(static_cast<void*>(&me->out), 0xFF, sizeof(T));
      continue;
    }
    me->out = static_cast<ShflSlot<T>*>(slots[src])->in;
  }
}
template <typename T>
T shfl(const char* what, Shfl kind, unsigned mask, T v, int arg, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move up to 64 bits");
  if (width < 1 || width > 32 || (width & (width - 1))) kernel_fault("shuffle width is not a power of two <= 32");
  ShflSlot<T> s{v, v, arg, width, kind};
  warp_collective(what, mask, &s, &shfl_complete<T>);
  return s.out;
}
}  // namespace zt::emu
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return zt::emu::shfl("__shfl_sync", zt::emu::Shfl::Idx, mask, v, src, width);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return zt::emu::shfl("__shfl_xor_sync", zt::emu::Shfl::Xor, mask, v, lane_mask, width);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return zt::emu::shfl("__shfl_down_sync", zt::emu::Shfl::Down, mask, v, int(delta), width);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return zt::emu::shfl("__shfl_up_sync", zt::emu::Shfl::Up, mask, v, int(delta), width);
}

// Atomics: blocks run concurrently on the emulator's worker threads, so these are real atomics.
template <typename T>
inline T atomicAdd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v, std::memory_order_relaxed);
}
inline unsigned __float_as_uint(float f) { return zt::emu::float_bits(f); }
inline float __uint_as_float(unsigned u) { return zt::emu::bits_float(u); }
inline int __float_as_int(float f) { return int(zt::emu::float_bits(f)); }
inline float __int_as_float(int i) { return zt::emu::bits_float(unsigned(i)); }
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}

// ---- math: the device library's functions, as the host's libm computes them (the GPU's
// approximate intrinsics, __expf and friends, are computed exactly here: an accuracy the
// hardware does not promise).
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __saturatef(float x) { return x < 0 ? 0.0f : x > 1 ? 1.0f : x; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

#include "engine/backend/cuda_emu/launch.h"
