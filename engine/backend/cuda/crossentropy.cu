// Softmax cross-entropy fused with its gradient (one block per row), and the vocabulary-parallel
// pieces. The probability tensor is never stored: the gradient overwrites the logits.
#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {
constexpr int kThreads = 512;

__global__ void softmax_crossentropy_kernel(float* losses, float* logits, const int32_t* targets, int V,
                                            float grad_scale) {
  float* row = logits + int64_t(blockIdx.x) * V;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, row[i]);
  mx = block_max(mx);
  float sum = 0;
  for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(row[i] - mx);
  sum = block_sum(sum);
  const float lse = mx + logf(sum);
  const int tgt = targets[blockIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) losses[blockIdx.x] = lse - row[tgt];
  __syncthreads();  // the target logit is read before it is overwritten
  if (grad_scale != 0.0f)
    for (int i = threadIdx.x; i < V; i += blockDim.x)
      row[i] = (expf(row[i] - lse) - (i == tgt ? 1.0f : 0.0f)) * grad_scale;
}
__global__ void row_max_kernel(float* out, const float* logits, int V) {
  const float* row = logits + int64_t(blockIdx.x) * V;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, row[i]);
  mx = block_max(mx);
  if (threadIdx.x == 0) out[blockIdx.x] = mx;
}
__global__ void row_sumexp_kernel(float* out, const float* logits, const float* row_max, int V) {
  const float* row = logits + int64_t(blockIdx.x) * V;
  const float mx = row_max[blockIdx.x];
  float sum = 0;
  for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(row[i] - mx);
  sum = block_sum(sum);
  if (threadIdx.x == 0) out[blockIdx.x] = sum;
}
__global__ void pick_target_kernel(float* out, const float* logits, const int32_t* targets, int N, int V, int v0) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int local = targets[n] - v0;
  out[n] = local >= 0 && local < V ? logits[int64_t(n) * V + local] : 0.0f;
}
__global__ void grad_from_lse_kernel(float* logits, const float* lse, const int32_t* targets, int V, int v0,
                                     float grad_scale) {
  float* row = logits + int64_t(blockIdx.x) * V;
  const float l = lse[blockIdx.x];
  const int local = targets[blockIdx.x] - v0;
  for (int i = threadIdx.x; i < V; i += blockDim.x)
    row[i] = (expf(row[i] - l) - (i == local ? 1.0f : 0.0f)) * grad_scale;
}
}  // namespace

void softmax_crossentropy(float* losses, float* logits, const int32_t* targets, int N, int V, float grad_scale,
                          cudaStream_t s) {
  softmax_crossentropy_kernel<<<N, kThreads, 0, s>>>(losses, logits, targets, V, grad_scale);
  ZT_CUDA_LAUNCH_CHECK();
}
void logits_row_max(float* out, const float* logits, int N, int V, cudaStream_t s) {
  row_max_kernel<<<N, kThreads, 0, s>>>(out, logits, V);
  ZT_CUDA_LAUNCH_CHECK();
}
void logits_row_sumexp(float* out, const float* logits, const float* row_max, int N, int V, cudaStream_t s) {
  row_sumexp_kernel<<<N, kThreads, 0, s>>>(out, logits, row_max, V);
  ZT_CUDA_LAUNCH_CHECK();
}
void logits_pick_target(float* out, const float* logits, const int32_t* targets, int N, int V, int v0,
                        cudaStream_t s) {
  pick_target_kernel<<<blocks_for(N, 256), 256, 0, s>>>(out, logits, targets, N, V, v0);
  ZT_CUDA_LAUNCH_CHECK();
}
void crossentropy_grad_from_lse(float* logits, const float* lse, const int32_t* targets, int N, int V, int v0,
                                float grad_scale, cudaStream_t s) {
  grad_from_lse_kernel<<<N, kThreads, 0, s>>>(logits, lse, targets, V, v0, grad_scale);
  ZT_CUDA_LAUNCH_CHECK();
}

}  // namespace zt::cuda
