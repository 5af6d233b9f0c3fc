// Token + position embedding, forward and backward (negative ids and a null wpe as in cpu/).
#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {
__global__ void embedding_forward_kernel(float* out, const int32_t* inp, const float* wte, const float* wpe,
                                         int T, int C) {
  const int bt = blockIdx.x, t = bt % T;
  const int tok = inp[bt];
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float v = tok >= 0 ? wte[int64_t(tok) * C + c] : 0.0f;
    if (wpe) v += wpe[int64_t(t) * C + c];
    out[int64_t(bt) * C + c] = v;
  }
}
// Tokens repeat, so rows of dwte collide: atomics (the summation order is not fixed on the GPU).
__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                                          int T, int C) {
  const int bt = blockIdx.x, t = bt % T;
  const int tok = inp[bt];
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = dout[int64_t(bt) * C + c];
    if (tok >= 0) atomicAdd(&dwte[int64_t(tok) * C + c], d);
    if (dwpe) atomicAdd(&dwpe[int64_t(t) * C + c], d);
  }
}
}  // namespace

void embedding_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T, int C,
                       cudaStream_t s) {
  embedding_forward_kernel<<<B * T, 256, 0, s>>>(out, inp, wte, wpe, T, C);
  ZT_CUDA_LAUNCH_CHECK();
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C,
                        cudaStream_t s) {
  embedding_backward_kernel<<<B * T, 256, 0, s>>>(dwte, dwpe, dout, inp, T, C);
  ZT_CUDA_LAUNCH_CHECK();
}

}  // namespace zt::cuda
