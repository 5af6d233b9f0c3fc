// LayerNorm forward/backward: one warp per row; parameter gradients by atomics per element.
#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                         const float* b, int N, int C, float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + int64_t(row) * C;
  float sum = 0;
  for (int c = lane; c < C; c += 32) sum += x[c];
  const float m = warp_sum(sum) / C;
  float var = 0;
  for (int c = lane; c < C; c += 32) var += (x[c] - m) * (x[c] - m);
  const float s = rsqrtf(warp_sum(var) / C + eps);
  float* o = out + int64_t(row) * C;
  for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * s * w[c] + b[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void layernorm_backward_kernel(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                                          const float* w, const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + int64_t(row) * C;
  const float* d = dout + int64_t(row) * C;
  const float m = mean[row], s = rstd[row];
  float dnorm_mean = 0, dnorm_norm_mean = 0;
  for (int c = lane; c < C; c += 32) {
    const float dn = w[c] * d[c];
    dnorm_mean += dn;
    dnorm_norm_mean += dn * (x[c] - m) * s;
  }
  dnorm_mean = warp_sum(dnorm_mean) / C;
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
  float* di = dinp + int64_t(row) * C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (x[c] - m) * s;
    di[c] += (w[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
    atomicAdd(&dw[c], norm * d[c]);
    atomicAdd(&db[c], d[c]);
  }
}
}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       int N, int C, float eps, cudaStream_t s) {
  layernorm_forward_kernel<<<blocks_for(N, 8), 256, 0, s>>>(out, mean, rstd, inp, w, b, N, C, eps);
  ZT_CUDA_LAUNCH_CHECK();
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, int N, int C, cudaStream_t s) {
  layernorm_backward_kernel<<<blocks_for(N, 8), 256, 0, s>>>(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  ZT_CUDA_LAUNCH_CHECK();
}

}  // namespace zt::cuda
