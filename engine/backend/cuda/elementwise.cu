// Elementwise ops, bias, GELU, sum of squares, AdamW (fp32 master weights and moments).
#include <algorithm>

#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {
constexpr int kThreads = 256;

__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
__global__ void scale_kernel(float* x, float f, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= f;
}
__global__ void add_bias_kernel(float* out, const float* bias, int64_t n, int OC) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] += bias[i % OC];
}
// One block per column chunk of 32, rows strided over the block's warps; a fixed order per column.
__global__ void bias_backward_kernel(float* dbias, const float* dout, int N, int OC) {
  const int col = blockIdx.x * 32 + threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  __shared__ float partial[32][33];
  float acc = 0;
  if (col < OC)
    for (int n = warp; n < N; n += warps) acc += dout[int64_t(n) * OC + col];
  partial[warp][threadIdx.x % 32] = acc;
  __syncthreads();
  if (warp == 0 && col < OC) {
    float total = 0;
    for (int w = 0; w < warps; ++w) total += partial[w][threadIdx.x];
    dbias[col] += total;
  }
}
constexpr float kSqrt2OverPi = 0.7978845608028654f;
__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  out[i] = 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}
__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  const float th = tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x));
  const float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
  dinp[i] += grad * dout[i];
}
__global__ void sum_squares_kernel(double* out, const float* x, int64_t n) {
  double acc = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    acc += double(x[i]) * double(x[i]);
  acc = block_sum(acc);
  if (threadIdx.x == 0) atomicAdd(out, acc);
}
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                             float beta2, float eps, float wd, float step_size, float bc2_sqrt) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float gi = g[i];
  float pi = p[i] * (1.0f - lr * wd);
  const float mi = m[i] * beta1 + gi * (1.0f - beta1);
  const float vi = v[i] * beta2 + gi * gi * (1.0f - beta2);
  pi -= step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  p[i] = pi;
  m[i] = mi;
  v[i] = vi;
}
}  // namespace

void add(float* out, const float* a, const float* b, int64_t n, cudaStream_t s) {
  add_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(out, a, b, n);
  ZT_CUDA_LAUNCH_CHECK();
}
void scale(float* x, float f, int64_t n, cudaStream_t s) {
  scale_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(x, f, n);
  ZT_CUDA_LAUNCH_CHECK();
}
void add_bias(float* out, const float* bias, int N, int OC, cudaStream_t s) {
  const int64_t n = int64_t(N) * OC;
  add_bias_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(out, bias, n, OC);
  ZT_CUDA_LAUNCH_CHECK();
}
void bias_backward(float* dbias, const float* dout, int N, int OC, cudaStream_t s) {
  bias_backward_kernel<<<blocks_for(OC, 32), 1024, 0, s>>>(dbias, dout, N, OC);
  ZT_CUDA_LAUNCH_CHECK();
}
void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t s) {
  gelu_forward_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(out, inp, n);
  ZT_CUDA_LAUNCH_CHECK();
}
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, cudaStream_t s) {
  gelu_backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(dinp, inp, dout, n);
  ZT_CUDA_LAUNCH_CHECK();
}
void sum_squares(double* out, const float* x, int64_t n, cudaStream_t s) {
  ZT_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double), s));
  const unsigned blocks = unsigned(std::min<int64_t>(1024, blocks_for(n, kThreads)));
  if (n > 0) sum_squares_kernel<<<blocks, kThreads, 0, s>>>(out, x, n);
  ZT_CUDA_LAUNCH_CHECK();
}
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float wd, int t, cudaStream_t s) {
  const float bc1 = 1.0f - powf(beta1, float(t)), bc2 = 1.0f - powf(beta2, float(t));
  adamw_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(p, g, m, v, n, lr, beta1, beta2, eps, wd, lr / bc1,
                                                           sqrtf(bc2));
  ZT_CUDA_LAUNCH_CHECK();
}

}  // namespace zt::cuda
