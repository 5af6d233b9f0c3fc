// CUDA implementations of the op interface (engine/backend/backend.h) on `stream`. Same semantics
// as engine/backend/cpu/ops.h, including "(accumulates)". T is the compute storage type (float,
// __nv_bfloat16 or __half); statistics, weight gradients and optimizer states are float. Every
// template is instantiated for the three types in its .cu file. Reductions have a fixed order
// (no atomics) except the embedding's token-row scatter. `scratch` arguments are device buffers
// of at least the *_scratch_floats() size, owned by the backend (no allocation inside a step).
#pragma once
#include <cuda_runtime.h>

#include <string>

#include <cstdint>

#include "engine/backend/cuda/attention_fa2_layout.h"
#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda_scratch.h"
#include "engine/backend/rope_scaling.h"

namespace zt::cuda {

// pos: each token's position in its document, (B,T) device int32 or null (cpu/ops.h)
template <typename T>
void embedding_forward(T* out, const int32_t* inp, const T* wte, const T* wpe, int B, int T_, int C,
                       const int32_t* pos, cudaStream_t s);
template <typename T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* inp, int B, int T_, int C,
                        const int32_t* pos, cudaStream_t s);
// The same in a fixed order, the CPU backend's (no atomics): the rows sorted by token, each
// token's rows summed by one block. scratch: embedding_sort_scratch_floats(B T) floats
// (embedding_sort.h).
template <typename T>
void embedding_backward_deterministic(float* dwte, float* dwpe, const T* dout, const int32_t* inp, int B, int T_,
                                      int C, const int32_t* pos, void* scratch, cudaStream_t s);

// Column sums over rows are split into this many row chunks, summed in chunk order at the end
// (their scratch: engine/backend/cuda_scratch.h).
constexpr int kColChunks = cuda_scratch::kColumnChunks;
// The row chunks for N rows: one per 256 rows (each of a block's 32 warps sums 8 or more), at most
// kColChunks. A function of N alone, so the summation order is still the same on every run; small
// batches launch a few blocks rather than kColChunks idle ones.
inline int column_chunks(int64_t N) { return blocks_for_at_most(N, 256, kColChunks); }
template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* w, const T* b, int N, int C, float eps,
                       cudaStream_t s);
template <typename T>
void residual_layernorm_forward(T* res, T* out, float* mean, float* rstd, const T* a, const T* b_, const T* w,
                                const T* b, int N, int C, float eps, cudaStream_t s);
template <typename T>
void layernorm_backward(T* dinp, float* dw, float* db, const T* dout, const T* inp, const T* w, const float* mean,
                        const float* rstd, int N, int C, float* scratch, cudaStream_t s);
template <typename T>
void bias_backward(float* dbias, const T* dout, int N, int OC, float* scratch, cudaStream_t s);  // dbias += sum_n dout
template <typename T>
void add_bias(T* out, const T* bias, int N, int OC, cudaStream_t s);  // out (N,OC) += bias
// FP8 linear layers (fp8_linear.cu; engine/backend/fp8_recipe.h), for shapes fp8_recipe::applies()
// takes. scratch: fp8_recipe::forward_scratch_bytes / backward_scratch_bytes (fp8_weight_copy:
// kScalarsBytes); bias_scratch: cuda_scratch::matmul_backward(OC, true) floats where dbias is given.
// w_copy (fp8_recipe::weight_copy_bytes, may be null: w is cast in the call): w's FP8 copy and
// scales from fp8_weight_copy.
class Gemm;
template <typename T>
void fp8_weight_copy(uint8_t* copy, const T* w, int OC, int C, void* scratch, cudaStream_t s);
// Backend::fp8_amax (scratch: cuda_scratch::fp8_amax) and fp8_cast_with_amax
template <typename T>
void fp8_amax(float* amax, const T* x, int64_t n, void* scratch, cudaStream_t s);
template <typename T>
void fp8_cast_with_amax(uint8_t* q, float* scales, const T* x, int64_t n, const float* amax, cudaStream_t s);
template <typename T>
void matmul_forward_fp8(Gemm& gemm, T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC,
                        const uint8_t* w_copy, void* scratch, cudaStream_t s);
template <typename T>
void matmul_backward_fp8(Gemm& gemm, T* dinp, float* dw, float* dbias, const T* dout, const T* inp, const T* w, int N,
                         int C, int OC, const uint8_t* w_copy, void* scratch, float* bias_scratch, cudaStream_t s);

// pos (null or (B,T) device int32): row t attends to keys [t - pos[t], t], its document (cpu/ops.h);
// every attention kernel skips the key tiles that lie wholly before a row's document.
// ZTRAIN_ATTENTION's value, checked (attention.cu): "", "cudnn", "fa2", "wmma" or "simt".
const std::string& attention_kernels_choice();
// Causal self-attention: cuDNN's fused attention or ztrain's kernels, chosen by measurement at each
// shape's first use where cuDNN can run it (attention_select.cu; never under `deterministic`, with
// documents, or on the emulated device); ztrain's otherwise. scratch: at least
// cuda_scratch::attention_forward() floats (cuDNN's engine workspace).
template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int NKV, const int32_t* pos,
                       float* scratch, int64_t scratch_floats, bool deterministic, cudaStream_t s);
// ztrain's kernels (attention.cu): FlashAttention-2, else WMMA, else CUDA cores.
template <typename T>
void attention_forward_own(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int NKV, const int32_t* pos,
                           cudaStream_t s);
// The FlashAttention-2-structured forward (attention_fa2.cu; 16-bit types, head size 64 or 128,
// 16-byte aligned qkv); false where it does not apply. attention_forward takes it unless
// ZTRAIN_ATTENTION names other kernels (attention.cu).
template <typename T>
bool attention_forward_fa2(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int NKV, const int32_t* pos,
                           cudaStream_t s);
// Its backward (head size 64 or 128), given D = rowsum(dout * out) (B,NH,T); false where it does not
// apply. dq_acc: an fp32 (B,T,C) scratch for FlashAttention-2's 5 units (dQ summed with atomics);
// null: 7 units, deterministic (attention_fa2_layout.h, backward_accumulates_dq).
template <typename T>
bool attention_backward_fa2(T* dqkv, float* dq_acc, const T* dout, const T* qkv, const float* lse, const float* D,
                            int B, int T_, int C, int NH, int NKV, const int32_t* pos, cudaStream_t s);
// scratch: cuda_scratch::attention_backward(B, T_, C, NH, sizeof(T), deterministic) floats
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* out, const T* qkv, const float* lse, int B, int T_, int C,
                        int NH, int NKV, const int32_t* pos, float* scratch, int64_t scratch_floats, bool deterministic,
                        cudaStream_t s);
template <typename T>
void attention_backward_own(T* dqkv, const T* dout, const T* out, const T* qkv, const float* lse, int B, int T_, int C,
                            int NH, int NKV, const int32_t* pos, float* scratch, bool deterministic, cudaStream_t s);

template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* w, int N, int C, float eps, cudaStream_t s);
template <typename T>
void residual_rmsnorm_forward(T* res, T* out, float* rstd, const T* a, const T* b, const T* w, int N, int C, float eps,
                              cudaStream_t s);
template <typename T>
void rmsnorm_backward(T* dinp, float* dw, const T* dout, const T* inp, const T* w, const float* rstd, int N, int C,
                      float* scratch, cudaStream_t s);  // scratch: cuda_scratch::rmsnorm_backward(C)
template <typename T>
void head_rmsnorm_forward(T* out, float* rstd, const T* inp, const T* w, int64_t N, int heads, int hs, int64_t stride,
                          float eps, cudaStream_t s);
template <typename T>
void head_rmsnorm_backward(T* dinp, float* dw, const T* dout, const T* inp, const T* w, const float* rstd, int64_t N,
                           int heads, int hs, int64_t stride, float* scratch,
                           cudaStream_t s);  // scratch: cuda_scratch::rmsnorm_backward(hs)
template <typename T>
void rope(T* x, int B, int T_, int n_heads, int hs, int64_t stride, float theta, bool inverse, const int32_t* pos,
          RopeScaling scaling, cudaStream_t s);
template <typename T>
void swiglu_forward(T* out, const T* inp, int64_t N, int F, cudaStream_t s);
template <typename T>
void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t N, int F, cudaStream_t s);

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n, cudaStream_t s);
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t s);

template <typename T>
void softmax_crossentropy(float* losses, T* logits, const int32_t* targets, int N, int V, int Vr, float grad_scale,
                          cudaStream_t s);
template <typename T>
void logits_row_max(float* out, const T* logits, int N, int V, int Vr, cudaStream_t s);
template <typename T>
void logits_row_sumexp(float* out, const T* logits, const float* row_max, int N, int V, int Vr, cudaStream_t s);
template <typename T>
void logits_pick_target(float* out, const T* logits, const int32_t* targets, int N, int V, int v0, cudaStream_t s);
template <typename T>
void crossentropy_grad_from_lse(T* logits, const float* lse, const int32_t* targets, int N, int V, int Vr, int v0,
                                float grad_scale, cudaStream_t s);

// dst (n) = src (n) converted; Src/Dst any of the three types.
template <typename Dst, typename Src>
void convert(Dst* dst, const Src* src, int64_t n, cudaStream_t s);
void add(float* out, const float* a, const float* b, int64_t n, cudaStream_t s);
// out = in x keep / (1 - p), keep from Philox at the element's global index (DeviceOps::dropout).
template <typename T>
void dropout(T* out, const T* in, int64_t N, int C, int64_t ld, float p, uint64_t key, uint64_t row0, int64_t cols,
             int64_t col0, cudaStream_t s);
// y[n * ldy + c] += alpha * x[n * ldx + c], n < N, c < C (fp32 maths).
template <typename T>
void add_rows_scaled(T* y, int64_t ldy, const T* x, int64_t ldx, int64_t N, int C, float alpha, cudaStream_t s);
void scale(float* x, float f, int64_t n, cudaStream_t s);
constexpr int kSumBlocks = cuda_scratch::kSumBlocks;  // sum_squares: a grid set by n, so a fixed summation order
// *acc += scale * sum of x^2 (square) or of x, in a fixed order; partial holds kSumBlocks doubles.
void sum_accumulate(double* acc, double* partial, const float* x, int64_t n, bool square, double scale,
                    cudaStream_t s);
// AdamW on fp32 p, g, m, v; pc (may be null) receives p in T in the same pass.
template <typename T>
void adamw_update(float* p, const float* g, float* m, float* v, T* pc, int64_t n, float lr, float beta1, float beta2,
                  float eps, float wd, int t, cudaStream_t s);

}  // namespace zt::cuda
