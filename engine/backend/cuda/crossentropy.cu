// Softmax cross-entropy fused with its gradient (one block per row), and the vocabulary-parallel
// pieces. The probability tensor is never stored: the gradient overwrites the logits. Logits are
// in the compute type; the maths (max, sum of exponentials, log) is fp32. A row is n elements, its
// first `real` the vocabulary's ids; the rest (padding, for tensor parallelism and vector access)
// take no part in the softmax and get a gradient of exactly 0: the mask is here, in the loss, so
// the head's GEMM needs no -inf bias epilogue.
#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/launch.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {
constexpr int kThreads = 512;

// Rows are read and written V elements per access (V = kVec<T>, 128 bits, where the rows allow;
// the vocabulary is padded to a multiple of 128, so they do). Thread i takes elements
// [(i + k blockDim) V, + V) for k = 0, 1, ...
// One pass for max and sum of exponentials (online rescaling, as flash attention's softmax).
template <int V, typename T>
__device__ float row_logsumexp(const T* row, int n, int real) {
  float mx = -INFINITY, sum = 0;
  for (int i = threadIdx.x * V; i < n; i += blockDim.x * V) {
    float x[V];
    load_floats<V>(x, row + i);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      // padding is not a class; a -inf logit adds nothing (and exp(-inf - -inf) would be NaN)
      if (i + k >= real || x[k] == -INFINITY) continue;
      if (x[k] > mx) {
        sum = sum * expf(mx - x[k]) + 1.0f;
        mx = x[k];
      } else {
        sum += expf(x[k] - mx);
      }
    }
  }
  const float bmx = block_max(mx);
  const float scaled = mx == -INFINITY ? 0.0f : sum * expf(mx - bmx);
  return bmx + logf(block_sum(scaled));
}
// row (n) = (softmax(row) - onehot(target)) * grad_scale, softmax from the row's log-sum-exp;
// 0 on the padding (and everywhere with grad_scale 0: a token without loss)
template <int V, typename T>
__device__ void write_grad(T* row, int n, int real, float lse, int target, float grad_scale) {
  for (int i = threadIdx.x * V; i < n; i += blockDim.x * V) {
    float x[V];
    load_floats<V>(x, row + i);
#pragma unroll
    for (int k = 0; k < V; ++k)
      x[k] = i + k < real ? (expf(x[k] - lse) - (i + k == target ? 1.0f : 0.0f)) * grad_scale : 0.0f;
    store_floats<V>(row + i, x);
  }
}
template <int V, typename T>
__global__ void __launch_bounds__(kThreads)
    softmax_crossentropy_kernel(float* losses, T* logits, const int32_t* targets, int n, int real,
                                            float grad_scale) {
  T* row = logits + int64_t(blockIdx.x) * n;
  const float lse = row_logsumexp<V>(row, n, real);
  const int tgt = targets[blockIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) losses[blockIdx.x] = tgt < 0 ? 0.0f : lse - to_float(row[tgt]);  // -1: no loss
  __syncthreads();  // the target logit is read before it is overwritten
  if (grad_scale != 0.0f) write_grad<V>(row, n, real, lse, tgt, tgt < 0 ? 0.0f : grad_scale);
}
template <int V, typename T>
__global__ void __launch_bounds__(kThreads) row_max_kernel(float* out, const T* logits, int n, int real) {
  const T* row = logits + int64_t(blockIdx.x) * n;
  float mx = -INFINITY;
  for (int i = threadIdx.x * V; i < n; i += blockDim.x * V) {
    float x[V];
    load_floats<V>(x, row + i);
#pragma unroll
    for (int k = 0; k < V; ++k)
      if (i + k < real) mx = fmaxf(mx, x[k]);
  }
  mx = block_max(mx);
  if (threadIdx.x == 0) out[blockIdx.x] = mx;
}
template <int V, typename T>
__global__ void __launch_bounds__(kThreads)
    row_sumexp_kernel(float* out, const T* logits, const float* row_max, int n, int real) {
  const T* row = logits + int64_t(blockIdx.x) * n;
  const float mx = row_max[blockIdx.x];
  float sum = 0;
  for (int i = threadIdx.x * V; i < n; i += blockDim.x * V) {
    float x[V];
    load_floats<V>(x, row + i);
#pragma unroll
    for (int k = 0; k < V; ++k)
      if (i + k < real) sum += expf(x[k] - mx);
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) out[blockIdx.x] = sum;
}
template <typename T>
__global__ void __launch_bounds__(256)
    pick_target_kernel(float* out, const T* logits, const int32_t* targets, int N, int V, int v0) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int local = targets[n] - v0;
  out[n] = local >= 0 && local < V ? to_float(logits[int64_t(n) * V + local]) : 0.0f;
}
template <int V, typename T>
__global__ void __launch_bounds__(kThreads)
    grad_from_lse_kernel(T* logits, const float* lse, const int32_t* targets, int n, int real, int v0,
                                     float grad_scale) {
  const int tgt = targets[blockIdx.x];  // -1: no loss, a zero row
  write_grad<V>(logits + int64_t(blockIdx.x) * n, n, real, lse[blockIdx.x], tgt - v0, tgt < 0 ? 0.0f : grad_scale);
}
}  // namespace

template <typename T>
void softmax_crossentropy(float* losses, T* logits, const int32_t* targets, int N, int V, int Vr, float grad_scale,
                          cudaStream_t s) {
  if (N <= 0) return;
  with_vec<T>(V, {logits}, [&](auto v) {
    launch(softmax_crossentropy_kernel<decltype(v)::value, T>, N, kThreads, 0, s, losses, logits, targets, V, Vr,
           grad_scale);
  });
  ZT_CUDA_LAUNCH_CHECK();
}
template <typename T>
void logits_row_max(float* out, const T* logits, int N, int V, int Vr, cudaStream_t s) {
  if (N <= 0) return;
  with_vec<T>(V, {logits},
              [&](auto v) { launch(row_max_kernel<decltype(v)::value, T>, N, kThreads, 0, s, out, logits, V, Vr); });
  ZT_CUDA_LAUNCH_CHECK();
}
template <typename T>
void logits_row_sumexp(float* out, const T* logits, const float* row_max, int N, int V, int Vr, cudaStream_t s) {
  if (N <= 0) return;
  with_vec<T>(V, {logits}, [&](auto v) {
    launch(row_sumexp_kernel<decltype(v)::value, T>, N, kThreads, 0, s, out, logits, row_max, V, Vr);
  });
  ZT_CUDA_LAUNCH_CHECK();
}
template <typename T>
void logits_pick_target(float* out, const T* logits, const int32_t* targets, int N, int V, int v0, cudaStream_t s) {
  if (N <= 0) return;
  launch(pick_target_kernel<T>, blocks_for(N, 256), 256, 0, s, out, logits, targets, N, V, v0);
  ZT_CUDA_LAUNCH_CHECK();
}
template <typename T>
void crossentropy_grad_from_lse(T* logits, const float* lse, const int32_t* targets, int N, int V, int Vr, int v0,
                                float grad_scale, cudaStream_t s) {
  if (N <= 0) return;
  with_vec<T>(V, {logits}, [&](auto v) {
    launch(grad_from_lse_kernel<decltype(v)::value, T>, N, kThreads, 0, s, logits, lse, targets, V, Vr, v0,
           grad_scale);
  });
  ZT_CUDA_LAUNCH_CHECK();
}

#define ZT_INSTANTIATE(T)                                                                                          \
  template void softmax_crossentropy<T>(float*, T*, const int32_t*, int, int, int, float, cudaStream_t);          \
  template void logits_row_max<T>(float*, const T*, int, int, int, cudaStream_t);                                 \
  template void logits_row_sumexp<T>(float*, const T*, const float*, int, int, int, cudaStream_t);                \
  template void logits_pick_target<T>(float*, const T*, const int32_t*, int, int, int, cudaStream_t);             \
  template void crossentropy_grad_from_lse<T>(T*, const float*, const int32_t*, int, int, int, int, float, cudaStream_t);
ZT_INSTANTIATE(float)
ZT_INSTANTIATE(__nv_bfloat16)
ZT_INSTANTIATE(__half)
#undef ZT_INSTANTIATE

}  // namespace zt::cuda
