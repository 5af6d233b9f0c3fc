// Token + position embedding, forward and backward (negative ids and a null wpe as in cpu/).
#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/launch.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {
// One block per token row, V channels per access (128 bits where the rows allow).
template <int V, typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* inp, const T* wte, const T* wpe, int T_, int C) {
  const int bt = blockIdx.x, t = bt % T_;
  const int tok = inp[bt];
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
    float v[V] = {}, p[V];
    if (tok >= 0) load_floats<V>(v, wte + int64_t(tok) * C + c);
    if (wpe) {
      load_floats<V>(p, wpe + int64_t(t) * C + c);
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] += p[k];
    }
    store_floats<V>(out + int64_t(bt) * C + c, v);
  }
}
// Tokens repeat, so rows of dwte collide: fp32 atomics (the one reduction on the GPU whose order
// is not fixed; the gradient buffers are fp32, so only the last bits vary between runs).
// dout is read V channels per access; the atomics stay scalar.
template <int V, typename T>
__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const T* dout, const int32_t* inp, int T_, int C) {
  const int bt = blockIdx.x, t = bt % T_;
  const int tok = inp[bt];
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
    float d[V];
    load_floats<V>(d, dout + int64_t(bt) * C + c);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (tok >= 0) atomicAdd(&dwte[int64_t(tok) * C + c + k], d[k]);
      if (dwpe) atomicAdd(&dwpe[int64_t(t) * C + c + k], d[k]);
    }
  }
}
// [run] deterministic: thread c owns channel c of every row and adds the positions in order, so
// the sums are the same every run (B*T dependent steps per thread: slower, see docs/gpus.md, "Deterministic runs").
template <typename T>
__global__ void embedding_backward_ordered_kernel(float* dwte, float* dwpe, const T* dout, const int32_t* inp,
                                                  int BT, int T_, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int bt = 0; bt < BT; ++bt) {
    const float d = to_float(dout[int64_t(bt) * C + c]);
    const int tok = inp[bt];
    if (tok >= 0) dwte[int64_t(tok) * C + c] += d;
    if (dwpe) dwpe[int64_t(bt % T_) * C + c] += d;
  }
}
}  // namespace

template <typename T>
void embedding_backward_deterministic(float* dwte, float* dwpe, const T* dout, const int32_t* inp, int B, int T_,
                                      int C, cudaStream_t s) {
  if (B * T_ <= 0) return;
  launch(embedding_backward_ordered_kernel<T>, (C + 127) / 128, 128, 0, s, dwte, dwpe, dout, inp, B * T_, T_, C);
  ZT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void embedding_forward(T* out, const int32_t* inp, const T* wte, const T* wpe, int B, int T_, int C, cudaStream_t s) {
  if (B * T_ <= 0) return;
  with_vec<T>(C, {out, wte, wpe}, [&](auto v) {
    launch(embedding_forward_kernel<decltype(v)::value, T>, B * T_, 256, 0, s, out, inp, wte, wpe, T_, C);
  });
  ZT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* inp, int B, int T_, int C,
                        cudaStream_t s) {
  if (B * T_ <= 0) return;
  with_vec<T>(C, {dout}, [&](auto v) {
    launch(embedding_backward_kernel<decltype(v)::value, T>, B * T_, 256, 0, s, dwte, dwpe, dout, inp, T_, C);
  });
  ZT_CUDA_LAUNCH_CHECK();
}

#define ZT_INSTANTIATE(T)                                                                                    \
  template void embedding_forward<T>(T*, const int32_t*, const T*, const T*, int, int, int, cudaStream_t); \
  template void embedding_backward<T>(float*, float*, const T*, const int32_t*, int, int, int, cudaStream_t); \
  template void embedding_backward_deterministic<T>(float*, float*, const T*, const int32_t*, int, int, int,     \
                                                    cudaStream_t);
ZT_INSTANTIATE(float)
ZT_INSTANTIATE(__nv_bfloat16)
ZT_INSTANTIATE(__half)
#undef ZT_INSTANTIATE

}  // namespace zt::cuda
