// Elementwise ops: conversions, GELU, bias, fp32 gradient helpers, sum of squares (fixed order)
// and AdamW (fp32 master weights and moments, compute copy written in the same pass). Kernels
// take V elements per thread: V = 16 bytes / element size (128-bit accesses) when every pointer
// is 16-byte aligned and n is a multiple of V, else 1.
#include <algorithm>

#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/launch.cuh"
#include "engine/backend/cuda/ops.cuh"
#include "engine/core/philox.h"

namespace zt::cuda {

namespace {
constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;

// Launches kernel<V> over n elements with the widest V the pointers and n allow (V <= VMAX).
template <int VMAX, typename Launch>
void launch_vec(int64_t n, std::initializer_list<const void*> ptrs, Launch run) {
  if (vectorizable(n, VMAX, ptrs)) run(std::integral_constant<int, VMAX>{}, blocks_for(n / VMAX, kThreads));
  else run(std::integral_constant<int, 1>{}, blocks_for(n, kThreads));
  ZT_CUDA_LAUNCH_CHECK();
}

template <int V, typename Dst, typename Src>
__global__ void __launch_bounds__(kThreads) convert_kernel(Dst* dst, const Src* src, int64_t n) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (i >= n) return;
  float x[V];
  load_floats<V>(x, src + i);
  store_floats<V>(dst + i, x);
}
template <int V>
__global__ void __launch_bounds__(kThreads) add_kernel(float* out, const float* a, const float* b, int64_t n) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (i >= n) return;
  float x[V], y[V];
  load_floats<V>(x, a + i);
  load_floats<V>(y, b + i);
#pragma unroll
  for (int k = 0; k < V; ++k) x[k] += y[k];
  store_floats<V>(out + i, x);
}
template <int V>
__global__ void __launch_bounds__(kThreads) scale_kernel(float* x, float f, int64_t n) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (i >= n) return;
  float v[V];
  load_floats<V>(v, x + i);
#pragma unroll
  for (int k = 0; k < V; ++k) v[k] *= f;
  store_floats<V>(x + i, v);
}
template <typename T>
__global__ void __launch_bounds__(kThreads) dropout_kernel(T* out, const T* in, int64_t N, int C, int64_t ld, float p,
                                                           uint64_t key, uint64_t row0, int64_t cols, int64_t col0) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * C) return;
  const int64_t n = i / C, c = i % C;
  const uint64_t index = (row0 + uint64_t(n)) * uint64_t(cols) + uint64_t(col0 + c);
  const float v = to_float(in[n * ld + c]);
  out[n * ld + c] = from_float<T>(dropout_keeps(key, index, p) ? v * (1.0f / (1.0f - p)) : 0.0f);
}
template <typename T>
__global__ void __launch_bounds__(kThreads)
    add_rows_scaled_kernel(T* y, int64_t ldy, const T* x, int64_t ldx, int64_t N, int C, float alpha) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * C) return;
  const int64_t n = i / C, c = i % C;
  y[n * ldy + c] = from_float<T>(to_float(y[n * ldy + c]) + alpha * to_float(x[n * ldx + c]));
}
template <typename T>
__global__ void __launch_bounds__(kThreads) add_bias_kernel(T* out, const T* bias, int64_t n, int OC) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = from_float<T>(to_float(out[i]) + to_float(bias[i % OC]));
}
// Column sums of dout (N,OC): block (x: 32 columns, y: row chunk), 32 warps striding the chunk's
// rows; partials (chunks = gridDim.y, OC) then summed in chunk order.
template <typename T>
__global__ void __launch_bounds__(1024) column_partial_kernel(float* partial, const T* dout, int N, int OC) {
  const int col = blockIdx.x * 32 + threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int rows = (N + gridDim.y - 1) / gridDim.y, r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
  __shared__ float part[32][33];
  float acc = 0;
  if (col < OC)
    for (int n = r0 + warp; n < r1; n += warps) acc += to_float(dout[int64_t(n) * OC + col]);
  part[warp][threadIdx.x % 32] = acc;
  __syncthreads();
  if (warp == 0 && col < OC) {
    float total = 0;
    for (int w = 0; w < warps; ++w) total += part[w][threadIdx.x];
    partial[int64_t(blockIdx.y) * OC + col] = total;
  }
}
__global__ void __launch_bounds__(kThreads) column_finish_kernel(float* out, const float* partial, int OC, int chunks) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= OC) return;
  float total = 0;
  for (int k = 0; k < chunks; ++k) total += partial[int64_t(k) * OC + col];
  out[col] += total;
}
__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}
template <int V, typename T>
__global__ void __launch_bounds__(kThreads) gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (i >= n) return;
  float x[V];
  load_floats<V>(x, inp + i);
#pragma unroll
  for (int k = 0; k < V; ++k) x[k] = gelu(x[k]);
  store_floats<V>(out + i, x);
}
template <int V, typename T>
__global__ void __launch_bounds__(kThreads) gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (i >= n) return;
  float x[V], d[V];  // read before dinp is written: dinp may be dout (in place)
  load_floats<V>(x, inp + i);
  load_floats<V>(d, dout + i);
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const float th = tanhf(kSqrt2OverPi * (x[k] + 0.044715f * x[k] * x[k] * x[k]));
    const float grad =
        0.5f * (1.0f + th) + 0.5f * x[k] * (1.0f - th * th) * kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x[k] * x[k]);
    d[k] *= grad;
  }
  store_floats<V>(dinp + i, d);
}
// Grid-stride partial sums, one per block (the grid depends on n alone, at most kSumBlocks), then
// one block sums the partials: the same order on every run.
__global__ void __launch_bounds__(kThreads)
    sum_partial_kernel(double* partial, const float* x, int64_t n, bool square) {
  double acc = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    acc += square ? double(x[i]) * double(x[i]) : double(x[i]);
  acc = block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}
// *out += scale * sum(partial)
__global__ void __launch_bounds__(kThreads)
    sum_partials_kernel(double* out, const double* partial, int n, double scale) {
  double acc = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) *out += scale * acc;
}
template <int V, typename T>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(float* p, const float* g, float* m, float* v, T* pc, int64_t n, float lr, float beta1,
                             float beta2, float eps, float wd, float step_size, float bc2_sqrt) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (i >= n) return;
  float pi[V], gi[V], mi[V], vi[V];
  load_floats<V>(pi, p + i);
  load_floats<V>(gi, g + i);
  load_floats<V>(mi, m + i);
  load_floats<V>(vi, v + i);
#pragma unroll
  for (int k = 0; k < V; ++k) {  // the order of torch.optim.AdamW, as cpu/adamw.cpp
    pi[k] *= 1.0f - lr * wd;
    mi[k] = mi[k] * beta1 + gi[k] * (1.0f - beta1);
    vi[k] = vi[k] * beta2 + gi[k] * gi[k] * (1.0f - beta2);
    pi[k] -= step_size * mi[k] / (sqrtf(vi[k]) / bc2_sqrt + eps);
  }
  store_floats<V>(p + i, pi);
  store_floats<V>(m + i, mi);
  store_floats<V>(v + i, vi);
  if (pc) store_floats<V>(pc + i, pi);
}
}  // namespace

template <typename Dst, typename Src>
void convert(Dst* dst, const Src* src, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  constexpr int VM = kVec<Dst> < kVec<Src> ? kVec<Dst> : kVec<Src>;
  launch_vec<VM>(n, {dst, src}, [&](auto vc, unsigned blocks) {
    launch(convert_kernel<decltype(vc)::value, Dst, Src>, blocks, kThreads, 0, s, dst, src, n);
  });
}
void add(float* out, const float* a, const float* b, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  launch_vec<4>(n, {out, a, b}, [&](auto vc, unsigned blocks) {
    launch(add_kernel<decltype(vc)::value>, blocks, kThreads, 0, s, out, a, b, n);
  });
}
void scale(float* x, float f, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  launch_vec<4>(n, {x}, [&](auto vc, unsigned blocks) {
    launch(scale_kernel<decltype(vc)::value>, blocks, kThreads, 0, s, x, f, n);
  });
}
template <typename T>
void dropout(T* out, const T* in, int64_t N, int C, int64_t ld, float p, uint64_t key, uint64_t row0, int64_t cols,
             int64_t col0, cudaStream_t s) {
  const int64_t n = N * C;
  if (n <= 0) return;
  launch(dropout_kernel<T>, blocks_for(n, kThreads), kThreads, 0, s, out, in, N, C, ld, p, key, row0, cols, col0);
  ZT_CUDA_LAUNCH_CHECK();
}
template <typename T>
void add_rows_scaled(T* y, int64_t ldy, const T* x, int64_t ldx, int64_t N, int C, float alpha, cudaStream_t s) {
  const int64_t n = N * C;
  if (n <= 0) return;
  launch(add_rows_scaled_kernel<T>, blocks_for(n, kThreads), kThreads, 0, s, y, ldy, x, ldx, N, C, alpha);
  ZT_CUDA_LAUNCH_CHECK();
}
template <typename T>
void add_bias(T* out, const T* bias, int N, int OC, cudaStream_t s) {
  const int64_t n = int64_t(N) * OC;
  if (n <= 0) return;
  launch(add_bias_kernel<T>, blocks_for(n, kThreads), kThreads, 0, s, out, bias, n, OC);
  ZT_CUDA_LAUNCH_CHECK();
}
template <typename T>
void bias_backward(float* dbias, const T* dout, int N, int OC, float* scratch, cudaStream_t s) {
  if (N <= 0 || OC <= 0) return;
  const int chunks = column_chunks(N);
  launch(column_partial_kernel<T>, dim3(blocks_for(OC, 32), chunks), 1024, 0, s, scratch, dout, N, OC);
  launch(column_finish_kernel, blocks_for(OC, kThreads), kThreads, 0, s, dbias, scratch, OC, chunks);
  ZT_CUDA_LAUNCH_CHECK();
}
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  launch_vec<kVec<T>>(n, {out, inp}, [&](auto vc, unsigned blocks) {
    launch(gelu_forward_kernel<decltype(vc)::value, T>, blocks, kThreads, 0, s, out, inp, n);
  });
}
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  launch_vec<kVec<T>>(n, {dinp, inp, dout}, [&](auto vc, unsigned blocks) {
    launch(gelu_backward_kernel<decltype(vc)::value, T>, blocks, kThreads, 0, s, dinp, inp, dout, n);
  });
}
void sum_accumulate(double* acc, double* partial, const float* x, int64_t n, bool square, double scale,
                    cudaStream_t s) {
  // no more blocks than a thread per element needs (a small tensor's sum costs a few blocks, not
  // kSumBlocks): the grid, and so the summation order, still depends on n alone
  const int blocks = blocks_for_at_most(n, kThreads, kSumBlocks);
  launch(sum_partial_kernel, blocks, kThreads, 0, s, partial, x, n, square);
  launch(sum_partials_kernel, 1, kThreads, 0, s, acc, partial, blocks, scale);
  ZT_CUDA_LAUNCH_CHECK();
}
template <typename T>
void adamw_update(float* p, const float* g, float* m, float* v, T* pc, int64_t n, float lr, float beta1, float beta2,
                  float eps, float wd, int t, cudaStream_t s) {
  if (n <= 0) return;
  const float bc1 = 1.0f - powf(beta1, float(t)), bc2 = 1.0f - powf(beta2, float(t));
  launch_vec<4>(n, {p, g, m, v, pc}, [&](auto vc, unsigned blocks) {
    launch(adamw_kernel<decltype(vc)::value, T>, blocks, kThreads, 0, s, p, g, m, v, pc, n, lr, beta1, beta2, eps, wd,
                                                                   lr / bc1, sqrtf(bc2));
  });
}

#define ZT_INSTANTIATE(T)                                                                                    \
  template void add_bias<T>(T*, const T*, int, int, cudaStream_t);                                          \
  template void add_rows_scaled<T>(T*, int64_t, const T*, int64_t, int64_t, int, float, cudaStream_t);     \
  template void dropout<T>(T*, const T*, int64_t, int, int64_t, float, uint64_t, uint64_t, int64_t, int64_t, \
                           cudaStream_t);                                                                  \
  template void bias_backward<T>(float*, const T*, int, int, float*, cudaStream_t);                         \
  template void gelu_forward<T>(T*, const T*, int64_t, cudaStream_t);                                       \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t, cudaStream_t);                            \
  template void adamw_update<T>(float*, const float*, float*, float*, T*, int64_t, float, float, float, float, \
                                float, int, cudaStream_t);                                                  \
  template void convert<T, float>(T*, const float*, int64_t, cudaStream_t);                                 \
  template void convert<T, __nv_bfloat16>(T*, const __nv_bfloat16*, int64_t, cudaStream_t);                 \
  template void convert<T, __half>(T*, const __half*, int64_t, cudaStream_t);
ZT_INSTANTIATE(float)
ZT_INSTANTIATE(__nv_bfloat16)
ZT_INSTANTIATE(__half)
#undef ZT_INSTANTIATE

}  // namespace zt::cuda
