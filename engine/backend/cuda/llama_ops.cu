// The Llama family's ops: RMSNorm (optionally fused with the residual add before it) and its
// backward, rotary position embedding (Hugging Face convention, see engine/backend/cpu/ops.h)
// and SwiGLU. Same layout as layernorm.cu: one warp per row for the row-wise parts (128-bit
// accesses where the row allows); the weight gradient is a column sum over rows in row chunks
// summed in chunk order (no atomics).
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/launch.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {
constexpr int kWarps = 8;  // rows per block
constexpr int kThreads = 256;

// Where a norm's row starts: rows of C channels, `heads` of them at the start of each token's
// row of `stride` elements (a plain norm: heads 1, stride C; Qwen3's per-head q/k norm: the heads
// of the packed qkv).
struct NormRows {
  int heads;
  int64_t stride;
  __device__ int64_t offset(int row, int C) const { return int64_t(row / heads) * stride + int64_t(row % heads) * C; }
};

// res = a + b (rounded to T) when a is not null, then out = rmsnorm(res or inp); V elements per
// access (128 bits where the row allows), as in layernorm.cu.
template <int V, typename T>
__global__ void __launch_bounds__(32 * kWarps)
    rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, T* res, const T* a, const T* b,
                                       const T* w, int N, int C, float eps, NormRows rows) {
  const int row = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t off = rows.offset(row, C);
  float ss;
  const T* x = row_input_sum<V>(ss, inp, res, a, b, off, C, lane, [](float u) { return u * u; });
  const float s = rsqrtf(warp_sum(ss) / C + eps);
  T* o = out + off;
  for (int c = lane * V; c < C; c += 32 * V) {
    float u[V], wv[V];
    load_floats<V>(u, x + c);
    load_floats<V>(wv, w + c);
#pragma unroll
    for (int k = 0; k < V; ++k) u[k] = u[k] * s * wv[k];
    store_floats<V>(o + c, u);
  }
  if (lane == 0) rstd[row] = s;
}

// dinp += s (w dout) - x s^3 mean(w dout x)  (dinp: the residual stream's gradient, two writers);
// written instead with !accumulate, where dinp may be dout (each lane reads its elements of the
// row before it writes them)
template <int V, typename T>
__global__ void __launch_bounds__(32 * kWarps)
    rmsnorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* w, const float* rstd,
                                             int N, int C, NormRows rows, bool accumulate) {
  const int row = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t off = rows.offset(row, C);
  const T* x = inp + off;
  const T* d = dout + off;
  const float s = rstd[row];
  float dot = 0;
  for (int c = lane * V; c < C; c += 32 * V) {
    float xv[V], dv[V], wv[V];
    load_floats<V>(xv, x + c);
    load_floats<V>(dv, d + c);
    load_floats<V>(wv, w + c);
#pragma unroll
    for (int k = 0; k < V; ++k) dot += wv[k] * dv[k] * xv[k];
  }
  const float k3 = warp_sum(dot) / C * s * s * s;
  T* di = dinp + off;
  for (int c = lane * V; c < C; c += 32 * V) {
    float xv[V], dv[V], wv[V], acc[V];
    load_floats<V>(xv, x + c);
    load_floats<V>(dv, d + c);
    load_floats<V>(wv, w + c);
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = 0;
    if (accumulate) load_floats<V>(acc, di + c);
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] += wv[k] * dv[k] * s - xv[k] * k3;
    store_floats<V>(di + c, acc);
  }
}

// Partial column sums of x * rstd * dout over a chunk of rows: block (x: 32 columns, y: row
// chunk); partial layout (chunks = gridDim.y, C).
template <typename T>
__global__ void __launch_bounds__(1024)
    rmsnorm_weight_partial_kernel(float* partial, const T* dout, const T* inp, const float* rstd, int N,
                                              int C, NormRows layout) {
  const int col = blockIdx.x * 32 + threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int rows = (N + gridDim.y - 1) / gridDim.y, r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
  __shared__ float pw[32][33];
  float acc = 0;
  if (col < C)
    for (int n = r0 + warp; n < r1; n += warps) {
      const int64_t i = layout.offset(n, C) + col;
      acc += to_float(inp[i]) * rstd[n] * to_float(dout[i]);
    }
  pw[warp][threadIdx.x % 32] = acc;
  __syncthreads();
  if (warp == 0 && col < C) {
    float t = 0;
    for (int k = 0; k < warps; ++k) t += pw[k][threadIdx.x];
    partial[int64_t(blockIdx.y) * C + col] = t;
  }
}

__global__ void __launch_bounds__(256) rmsnorm_weight_finish_kernel(float* dw, const float* partial, int C, int chunks) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= C) return;
  float t = 0;
  for (int k = 0; k < chunks; ++k) t += partial[int64_t(k) * C + col];
  dw[col] += t;
}

// One thread per (b, t, head, i < hs/2): rotates the pair (i, i + hs/2). The frequency in fp32
// as Hugging Face computes it; sincosf at full precision (no fast-math intrinsics).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(T* x, int B, int T_, int n_heads, int hs, int64_t stride, float theta, bool inverse,
                const int32_t* pos, RopeScaling scaling) {
  const int half = hs / 2;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(B) * T_ * n_heads * half) return;
  const int i = int(idx % half), h = int(idx / half % n_heads);
  const int64_t bt = idx / half / n_heads;
  const int t = pos ? pos[bt] : int(bt % T_);  // the position in its document
  const float inv_freq = rope_inv_freq(theta, i, hs, scaling);  // plain or Llama 3.1's rule
  float sn, cs;
  sincosf(float(t) * inv_freq, &sn, &cs);
  if (inverse) sn = -sn;
  T* lo = x + bt * stride + int64_t(h) * hs + i;
  T* hi = lo + half;
  const float a = to_float(*lo), z = to_float(*hi);
  *lo = from_float<T>(a * cs - z * sn);
  *hi = from_float<T>(z * cs + a * sn);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) swiglu_forward_kernel(T* out, const T* inp, int64_t N, int F) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= N * F) return;
  const int64_t n = idx / F, i = idx % F;
  const float g = to_float(inp[n * 2 * F + i]), u = to_float(inp[n * 2 * F + F + i]);
  out[idx] = from_float<T>(g / (1.0f + expf(-g)) * u);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t N, int F) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= N * F) return;
  const int64_t n = idx / F, i = idx % F, gi = n * 2 * F + i, ui = gi + F;
  const float g = to_float(inp[gi]), u = to_float(inp[ui]), d = to_float(dout[idx]);
  const float sig = 1.0f / (1.0f + expf(-g));
  dinp[gi] = from_float<T>(d * u * sig * (1.0f + g * (1.0f - sig)));  // written, not accumulated
  dinp[ui] = from_float<T>(d * g * sig);
}
}  // namespace

template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* w, int N, int C, float eps, cudaStream_t s) {
  if (N <= 0) return;
  with_vec<T>(C, {out, inp, w}, [&](auto v) {
    launch(rmsnorm_forward_kernel<decltype(v)::value, T>, blocks_for(N, kWarps), 32 * kWarps, 0, s, out, rstd, inp,
           nullptr, nullptr, nullptr, w, N, C, eps, NormRows{1, C});
  });
  ZT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void residual_rmsnorm_forward(T* res, T* out, float* rstd, const T* a, const T* b, const T* w, int N, int C, float eps,
                              cudaStream_t s) {
  if (N <= 0) return;
  with_vec<T>(C, {res, out, a, b, w}, [&](auto v) {
    launch(rmsnorm_forward_kernel<decltype(v)::value, T>, blocks_for(N, kWarps), 32 * kWarps, 0, s, out, rstd, nullptr,
           res, a, b, w, N, C, eps, NormRows{1, C});
  });
  ZT_CUDA_LAUNCH_CHECK();
}

namespace {
// The backward of a norm over `rows` (N of them): the weight's column sums first, then the
// input gradient, so that the latter may overwrite dout (in place).
template <typename T>
void norm_rows_backward(T* dinp, float* dw, const T* dout, const T* inp, const T* w, const float* rstd, int N, int C,
                        NormRows rows, bool accumulate, int64_t vec_span, float* scratch, cudaStream_t s) {
  if (dw) {  // null: a frozen weight (LoRA's base), the input gradient only
    const int chunks = column_chunks(N);
    launch(rmsnorm_weight_partial_kernel<T>, dim3(blocks_for(C, 32), chunks), 1024, 0, s, scratch, dout, inp, rstd, N,
           C, rows);
    launch(rmsnorm_weight_finish_kernel, blocks_for(C, 256), 256, 0, s, dw, scratch, C, chunks);
  }
  with_vec<T>(vec_span, {dinp, dout, inp, w}, [&](auto v) {
    launch(rmsnorm_backward_dinp_kernel<decltype(v)::value, T>, blocks_for(N, kWarps), 32 * kWarps, 0, s, dinp, dout,
           inp, w, rstd, N, C, rows, accumulate);
  });
  ZT_CUDA_LAUNCH_CHECK();
}

// The rows of a per-head norm as a count of ints (the kernels index rows with int).
int head_rows(int64_t N, int heads) {
  if (N * heads > std::numeric_limits<int>::max())
    throw std::runtime_error("head_rmsnorm: " + std::to_string(N) + " rows of " + std::to_string(heads) +
                             " heads, more than 2^31");
  return int(N * heads);
}
}  // namespace

template <typename T>
void rmsnorm_backward(T* dinp, float* dw, const T* dout, const T* inp, const T* w, const float* rstd, int N, int C,
                      float* scratch, cudaStream_t s) {
  if (N <= 0) return;
  norm_rows_backward(dinp, dw, dout, inp, w, rstd, N, C, NormRows{1, C}, true, C, scratch, s);
}

template <typename T>
void head_rmsnorm_forward(T* out, float* rstd, const T* inp, const T* w, int64_t N, int heads, int hs, int64_t stride,
                          float eps, cudaStream_t s) {
  if (N <= 0 || heads <= 0) return;
  const int rows = head_rows(N, heads);
  // 128-bit accesses where every row start allows them: hs and stride both multiples of the width
  with_vec<T>(std::gcd(int64_t(hs), stride), {out, inp, w}, [&](auto v) {
    launch(rmsnorm_forward_kernel<decltype(v)::value, T>, blocks_for(rows, kWarps), 32 * kWarps, 0, s, out, rstd, inp,
           nullptr, nullptr, nullptr, w, rows, hs, eps, NormRows{heads, stride});
  });
  ZT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void head_rmsnorm_backward(T* dinp, float* dw, const T* dout, const T* inp, const T* w, const float* rstd, int64_t N,
                           int heads, int hs, int64_t stride, float* scratch, cudaStream_t s) {
  if (N <= 0 || heads <= 0) return;
  norm_rows_backward(dinp, dw, dout, inp, w, rstd, head_rows(N, heads), hs, NormRows{heads, stride}, false,
                     std::gcd(int64_t(hs), stride), scratch, s);
}

template <typename T>
void rope(T* x, int B, int T_, int n_heads, int hs, int64_t stride, float theta, bool inverse, const int32_t* pos,
          RopeScaling scaling, cudaStream_t s) {
  const int64_t n = int64_t(B) * T_ * n_heads * (hs / 2);
  if (n <= 0) return;
  launch(rope_kernel<T>, blocks_for(n, kThreads), kThreads, 0, s, x, B, T_, n_heads, hs, stride, theta, inverse, pos, scaling);
  ZT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t N, int F, cudaStream_t s) {
  if (N * F <= 0) return;
  launch(swiglu_forward_kernel<T>, blocks_for(N * F, kThreads), kThreads, 0, s, out, inp, N, F);
  ZT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int F, cudaStream_t s) {
  if (N * F <= 0) return;
  launch(swiglu_backward_kernel<T>, blocks_for(N * F, kThreads), kThreads, 0, s, dinp, inp, dout, N, F);
  ZT_CUDA_LAUNCH_CHECK();
}

#define ZT_INSTANTIATE(T)                                                                                         \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, int, int, float, cudaStream_t);               \
  template void residual_rmsnorm_forward<T>(T*, T*, float*, const T*, const T*, const T*, int, int, float,       \
                                            cudaStream_t);                                                       \
  template void rmsnorm_backward<T>(T*, float*, const T*, const T*, const T*, const float*, int, int, float*,    \
                                    cudaStream_t);                                                               \
  template void head_rmsnorm_forward<T>(T*, float*, const T*, const T*, int64_t, int, int, int64_t, float,         \
                                        cudaStream_t);                                                           \
  template void head_rmsnorm_backward<T>(T*, float*, const T*, const T*, const T*, const float*, int64_t, int, int, \
                                         int64_t, float*, cudaStream_t);                                         \
  template void rope<T>(T*, int, int, int, int, int64_t, float, bool, const int32_t*, RopeScaling, cudaStream_t); \
  template void swiglu_forward<T>(T*, const T*, int64_t, int, cudaStream_t);                                     \
  template void swiglu_backward<T>(T*, const T*, const T*, int64_t, int, cudaStream_t);
ZT_INSTANTIATE(float)
ZT_INSTANTIATE(__nv_bfloat16)
ZT_INSTANTIATE(__half)
#undef ZT_INSTANTIATE

}  // namespace zt::cuda
