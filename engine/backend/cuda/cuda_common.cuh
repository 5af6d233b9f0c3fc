// Shared helpers for the CUDA backend: error checks (file:line, thrown as std::runtime_error so
// the C++ side reports them and exits 1) and warp/block reductions.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace zt::cuda {

[[noreturn]] inline void fail(const char* file, int line, const char* what, const char* detail) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s:%d: %s: %s", file, line, what, detail);
  throw std::runtime_error(buf);
}

#define ZT_CUDA_CHECK(call)                                                          \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) ::zt::cuda::fail(__FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
  } while (0)

#define ZT_CUDA_LAUNCH_CHECK() ZT_CUDA_CHECK(cudaGetLastError())

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over a block whose size is a multiple of 32 (<= 1024); every thread gets the result.
template <typename T>
__device__ inline T block_sum(T v) {
  __shared__ T shared[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T total = lane < warps ? shared[lane] : T(0);
  return warp_sum(total);
}
__device__ inline float block_max(float v) {
  __shared__ float shared[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(m);
}

inline unsigned blocks_for(long long n, int threads) { return unsigned((n + threads - 1) / threads); }

}  // namespace zt::cuda
