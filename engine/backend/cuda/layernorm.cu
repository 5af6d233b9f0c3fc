// LayerNorm forward (optionally fused with the residual add before it) and backward: one warp per
// row for the row-wise parts, 128-bit accesses where the row allows; the weight/bias gradients are
// column sums over rows computed in row chunks and summed in chunk order (deterministic, no atomics).
#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/launch.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {
constexpr int kWarps = 8;  // rows per block

// res = a + b (rounded to T) when a is not null, then out = layernorm(res or inp). Each lane
// moves V elements per access (V = kVec<T>: 128 bits, where the row allows). The row is read from
// global memory three times; the second and third reads hit L1/L2.
template <int V, typename T>
__global__ void __launch_bounds__(32 * kWarps)
    layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, T* res, const T* a,
                                         const T* b_, const T* w, const T* b, int N, int C, float eps) {
  const int row = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t off = int64_t(row) * C;
  float sum;
  const T* x = row_input_sum<V>(sum, inp, res, a, b_, off, C, lane, [](float u) { return u; });
  const float m = warp_sum(sum) / C;
  float var = 0;
  for (int c = lane * V; c < C; c += 32 * V) {
    float u[V];
    load_floats<V>(u, x + c);
#pragma unroll
    for (int k = 0; k < V; ++k) var += (u[k] - m) * (u[k] - m);
  }
  const float s = rsqrtf(warp_sum(var) / C + eps);
  T* o = out + off;
  for (int c = lane * V; c < C; c += 32 * V) {
    float u[V], wv[V], bv[V];
    load_floats<V>(u, x + c);
    load_floats<V>(wv, w + c);
    load_floats<V>(bv, b + c);
#pragma unroll
    for (int k = 0; k < V; ++k) u[k] = (u[k] - m) * s * wv[k] + bv[k];
    store_floats<V>(o + c, u);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dinp += the LayerNorm's input gradient (dinp is the residual stream's gradient: two writers)
template <int V, typename T>
__global__ void __launch_bounds__(32 * kWarps)
    layernorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* w, const float* mean,
                                               const float* rstd, int N, int C) {
  const int row = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t off = int64_t(row) * C;
  const T* x = inp + off;
  const T* d = dout + off;
  const float m = mean[row], s = rstd[row];
  float dnorm_mean = 0, dnorm_norm_mean = 0;
  for (int c = lane * V; c < C; c += 32 * V) {
    float xv[V], dv[V], wv[V];
    load_floats<V>(xv, x + c);
    load_floats<V>(dv, d + c);
    load_floats<V>(wv, w + c);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float dn = wv[k] * dv[k];
      dnorm_mean += dn;
      dnorm_norm_mean += dn * (xv[k] - m) * s;
    }
  }
  dnorm_mean = warp_sum(dnorm_mean) / C;
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
  T* di = dinp + off;
  for (int c = lane * V; c < C; c += 32 * V) {
    float xv[V], dv[V], wv[V], acc[V];
    load_floats<V>(xv, x + c);
    load_floats<V>(dv, d + c);
    load_floats<V>(wv, w + c);
    load_floats<V>(acc, di + c);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float norm = (xv[k] - m) * s;
      acc[k] += (wv[k] * dv[k] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
    store_floats<V>(di + c, acc);
  }
}

// Partial column sums of norm * dout (dw) and dout (db) over a chunk of rows: block (x: 32
// columns, y: row chunk); partial layout (2, chunks = gridDim.y, C).
template <typename T>
__global__ void __launch_bounds__(1024)
    layernorm_param_partial_kernel(float* partial, const T* dout, const T* inp, const float* mean,
                                               const float* rstd, int N, int C) {
  const int col = blockIdx.x * 32 + threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int rows = (N + gridDim.y - 1) / gridDim.y, r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
  __shared__ float pw[32][33], pb[32][33];
  float accw = 0, accb = 0;
  if (col < C)
    for (int n = r0 + warp; n < r1; n += warps) {
      const int64_t i = int64_t(n) * C + col;
      const float d = to_float(dout[i]);
      accw += (to_float(inp[i]) - mean[n]) * rstd[n] * d;
      accb += d;
    }
  pw[warp][threadIdx.x % 32] = accw;
  pb[warp][threadIdx.x % 32] = accb;
  __syncthreads();
  if (warp == 0 && col < C) {
    float tw = 0, tb = 0;
    for (int k = 0; k < warps; ++k) {
      tw += pw[k][threadIdx.x];
      tb += pb[k][threadIdx.x];
    }
    partial[int64_t(blockIdx.y) * C + col] = tw;
    partial[(int64_t(gridDim.y) + blockIdx.y) * C + col] = tb;
  }
}

__global__ void __launch_bounds__(256)
    layernorm_param_finish_kernel(float* dw, float* db, const float* partial, int C, int chunks) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= C) return;
  float tw = 0, tb = 0;
  for (int k = 0; k < chunks; ++k) {
    tw += partial[int64_t(k) * C + col];
    tb += partial[(int64_t(chunks) + k) * C + col];
  }
  dw[col] += tw;
  db[col] += tb;
}
}  // namespace

template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b, int N, int C, float eps,
                       cudaStream_t s) {
  if (N <= 0) return;
  with_vec<T>(C, {out, inp, w, b}, [&](auto v) {
    launch(layernorm_forward_kernel<decltype(v)::value, T>, blocks_for(N, kWarps), 32 * kWarps, 0, s, out, mean, rstd,
           inp, nullptr, nullptr, nullptr, w, b, N, C, eps);
  });
  ZT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void residual_layernorm_forward(T* res, T* out, float* mean, float* rstd, const T* a, const T* b_, const T* w,
                                const T* b, int N, int C, float eps, cudaStream_t s) {
  if (N <= 0) return;
  with_vec<T>(C, {res, out, a, b_, w, b}, [&](auto v) {
    launch(layernorm_forward_kernel<decltype(v)::value, T>, blocks_for(N, kWarps), 32 * kWarps, 0, s, out, mean, rstd,
           nullptr, res, a, b_, w, b, N, C, eps);
  });
  ZT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void layernorm_backward(T* dinp, float* dw, float* db, const T* dout, const T* inp, const T* w, const float* mean,
                        const float* rstd, int N, int C, float* scratch, cudaStream_t s) {
  if (N <= 0) return;
  with_vec<T>(C, {dinp, dout, inp, w}, [&](auto v) {
    launch(layernorm_backward_dinp_kernel<decltype(v)::value, T>, blocks_for(N, kWarps), 32 * kWarps, 0, s, dinp, dout,
           inp, w, mean, rstd, N, C);
  });
  if (dw) {  // null: a frozen weight and bias (LoRA's base), the input gradient only
    const int chunks = column_chunks(N);
    launch(layernorm_param_partial_kernel<T>, dim3(blocks_for(C, 32), chunks), 1024, 0, s, scratch, dout, inp, mean,
           rstd, N, C);
    launch(layernorm_param_finish_kernel, blocks_for(C, 256), 256, 0, s, dw, db, scratch, C, chunks);
  }
  ZT_CUDA_LAUNCH_CHECK();
}

#define ZT_INSTANTIATE(T)                                                                                     \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int, int, float,      \
                                     cudaStream_t);                                                          \
  template void residual_layernorm_forward<T>(T*, T*, float*, float*, const T*, const T*, const T*, const T*, \
                                              int, int, float, cudaStream_t);                                \
  template void layernorm_backward<T>(T*, float*, float*, const T*, const T*, const T*, const float*,        \
                                      const float*, int, int, float*, cudaStream_t);
ZT_INSTANTIATE(float)
ZT_INSTANTIATE(__nv_bfloat16)
ZT_INSTANTIATE(__half)
#undef ZT_INSTANTIATE

}  // namespace zt::cuda
