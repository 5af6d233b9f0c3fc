// CUDA implementations of the op interface (engine/backend/backend.h), fp32, on `stream`. Same
// semantics as engine/backend/cpu/ops.h, including "(accumulates)". Plain pointers + a stream;
// the CudaBackend class validates nothing further and dispatches here.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace zt::cuda {

void embedding_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T, int C, cudaStream_t s);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C, cudaStream_t s);
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b, int N, int C, float eps, cudaStream_t s);
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w, const float* mean, const float* rstd, int N, int C, cudaStream_t s);
void add_bias(float* out, const float* bias, int N, int OC, cudaStream_t s);                 // out (N,OC) += bias
void bias_backward(float* dbias, const float* dout, int N, int OC, cudaStream_t s);          // dbias += sum_n dout
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, cudaStream_t s);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* lse, int B, int T, int C, int NH, cudaStream_t s);
void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t s);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, cudaStream_t s);
void softmax_crossentropy(float* losses, float* logits, const int32_t* targets, int N, int V, float grad_scale, cudaStream_t s);
void logits_row_max(float* out, const float* logits, int N, int V, cudaStream_t s);
void logits_row_sumexp(float* out, const float* logits, const float* row_max, int N, int V, cudaStream_t s);
void logits_pick_target(float* out, const float* logits, const int32_t* targets, int N, int V, int v0, cudaStream_t s);
void crossentropy_grad_from_lse(float* logits, const float* lse, const int32_t* targets, int N, int V, int v0, float grad_scale, cudaStream_t s);
void add(float* out, const float* a, const float* b, int64_t n, cudaStream_t s);
void scale(float* x, float f, int64_t n, cudaStream_t s);
void sum_squares(double* out, const float* x, int64_t n, cudaStream_t s);  // *out = sum x^2 (device double)
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps, float wd, int t, cudaStream_t s);

}  // namespace zt::cuda
