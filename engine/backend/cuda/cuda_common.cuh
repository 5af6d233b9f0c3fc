// Shared helpers for the CUDA backend: error checks (file:line, thrown as std::runtime_error so
// the C++ side reports them and exits 1) and warp/block reductions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <initializer_list>
#include <type_traits>

#include <cstdint>

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

// The first key row t of sequence b attends to: the first token of its document, t - pos[b, t]
// (pos: each token's position in its document, (B, T); null: one document a row, key 0).
__device__ __forceinline__ int doc_first(const int32_t* pos, int b, int T, int t) {
  return pos ? t - pos[int64_t(b) * T + t] : 0;
}

inline unsigned blocks_for(long long n, int threads) { return unsigned((n + threads - 1) / threads); }
// blocks_for, at least 1 and at most `most`: a reduction's grid set by its size alone (a fixed
// summation order), with no idle blocks for a small tensor
inline int blocks_for_at_most(long long n, int threads, int most) {
  return int(std::min<long long>(std::max<long long>(blocks_for(n, threads), 1), most));
}

// ---- storage types: activations and compute weights are float, __nv_bfloat16 or __half; every
// kernel loads them to float, computes in float and rounds once when it stores (round to nearest
// even, as the CPU backend's emulation).
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half(x); }

// V elements loaded or stored as one access (128-bit when V * sizeof(T) == 16).
template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};
template <int V, typename T>
__device__ __forceinline__ void load_floats(float (&out)[V], const T* p) {
  const Vec<T, V> x = *reinterpret_cast<const Vec<T, V>*>(p);
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = to_float(x.v[i]);
}
template <int V, typename T>
__device__ __forceinline__ void store_floats(T* p, const float (&in)[V]) {
  Vec<T, V> x;
#pragma unroll
  for (int i = 0; i < V; ++i) x.v[i] = from_float<T>(in[i]);
  *reinterpret_cast<Vec<T, V>*>(p) = x;
}
// One lane's part of row `off / C` for the row-normalizing kernels (a warp a row, V elements a
// lane per access): the sum of f(x) over the lane's elements of the row of x, where x is `inp`,
// or, when a is not null, res = a + b rounded to T (written; the sum is over the stored values).
// Returns the row the norm reads next (of inp or of res).
template <int V, typename T, typename F>
__device__ __forceinline__ const T* row_input_sum(float& sum, const T* inp, T* res, const T* a, const T* b,
                                                  int64_t off, int C, int lane, F f) {
  sum = 0;
  if (!a) {
    for (int c = lane * V; c < C; c += 32 * V) {
      float u[V];
      load_floats<V>(u, inp + off + c);
#pragma unroll
      for (int k = 0; k < V; ++k) sum += f(u[k]);
    }
    return inp + off;
  }
  for (int c = lane * V; c < C; c += 32 * V) {
    float u[V], v[V];
    load_floats<V>(u, a + off + c);
    load_floats<V>(v, b + off + c);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      u[k] = to_float(from_float<T>(u[k] + v[k]));  // the sum as stored
      sum += f(u[k]);
    }
    store_floats<V>(res + off + c, u);
  }
  __syncwarp();
  return res + off;
}

// Elements per 128-bit access of T.
template <typename T>
constexpr int kVec = 16 / int(sizeof(T));
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
// 128-bit accesses apply when every (non-null) pointer is 16-byte aligned and the rows (n
// elements) are whole vectors, so every row starts aligned too.
inline bool vectorizable(int64_t n, int v, std::initializer_list<const void*> ptrs) {
  bool ok = n % v == 0;
  for (const void* p : ptrs) ok = ok && (p == nullptr || aligned16(p));
  return ok;
}
// Runs fn(std::integral_constant<int, V>) with V = kVec<T> where vectorizable, else V = 1.
template <typename T, typename Fn>
void with_vec(int64_t n, std::initializer_list<const void*> ptrs, Fn fn) {
  if (vectorizable(n, kVec<T>, ptrs)) fn(std::integral_constant<int, kVec<T>>{});
  else fn(std::integral_constant<int, 1>{});
}

}  // namespace zt::cuda
