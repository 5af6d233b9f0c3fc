// CPU reference ops, forward and backward, one family per source file. They are templates over the
// float type: the engine runs them in float; the tests also run them in double, where finite
// differences are exact enough to prove every backward, and then compare float against double.
// Conventions: row-major, shape comments name the dims, backward ops ACCUMULATE (+=) into grads so
// gradient accumulation and residual branches need no extra pass, except the elementwise GELU and
// SwiGLU backward, which write (the Backend interface writes every single-writer activation
// gradient; the CPU backend zero-fills before the accumulating ones). Threads: OpenMP, static
// partitions chosen so every reduction has a fixed order (bit-identical reruns).
#pragma once
#include <cstdint>

#include "engine/backend/rope_scaling.h"

#include "engine/core/dtype.h"

#include "engine/core/fp8.h"

namespace zt::cpu {

// C (M,N) = alpha * op(A) @ op(B) + beta * C, row-major; op(X) = X^T when trans_X.
template <typename F>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, F alpha, const F* A, int lda,
          const F* B, int ldb, F beta, F* C, int ldc);

// Positions (pos below): (B,T) int32, each token's position in its document (0 at a document's
// first token, counting up), for rows packed with several documents; null means one document a
// row (position t). Token t of a row then attends to keys [t - pos[t], t] only (its document),
// and the position embedding / rotation uses pos[t] (GPT-2: row pos[t] of wpe; Llama: RoPE's
// angle pos[t] * inv_freq).

// out (B,T,C) = wte[inp[b,t], :] + wpe[pos[b,t] or t, :]. A negative id contributes no token row
// and a null wpe no position row (vocabulary-parallel embedding: ids outside this rank's slice are
// -1, and one rank adds positions).
template <typename F>
void embedding_forward(F* out, const int32_t* inp, const F* wte, const F* wpe, int B, int T, int C,
                       const int32_t* pos = nullptr);
// dwte (V,C) += scatter of dout by token (negative ids skipped); dwpe (maxT,C) += scatter by
// position (skipped when null); both in (b, t) order
template <typename F>
void embedding_backward(F* dwte, F* dwpe, const F* dout, const int32_t* inp, int B, int T, int C,
                        const int32_t* pos = nullptr);

// out (N,C) = (inp - mean) * rstd * weight + bias; mean, rstd (N) saved for backward.
template <typename F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* inp, const F* weight, const F* bias,
                       int N, int C, float eps);
template <typename F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp,
                        const F* weight, const F* mean, const F* rstd, int N, int C);

// out (N,OC) = inp (N,C) @ weight^T (weight (OC,C), as nn.Linear) + bias (OC, may be null)
template <typename F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC);
// dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp; dbias (OC) += sum_n dout.
// Any of dinp / dbias may be null.
// The norms' backward (layernorm, rmsnorm, head_rmsnorm) take dweight (and dbias) null for a
// frozen weight (LoRA's base): the input gradient only.
template <typename F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                     int N, int C, int OC);
// FP8 linear layers' reference (engine/backend/fp8_recipe.h; fp8_linear.cpp): the same shapes as
// matmul_forward / matmul_backward; dinp written (not accumulated). fp8_quantize: q (n) = x (n)
// times its per-tensor scale, rounded to f (kept as floats); returns the inverse scale.
// fp8_weight_copy: a weight's copy (fp8_recipe::weight_copy_bytes: its scales and E4M3 bytes), which
// the products take in place of the weight's own cast where w_copy is not null.
float fp8_quantize(const float* x, int64_t n, fp8::Format f, float* q);
void fp8_weight_copy(uint8_t* copy, const float* weight, int OC, int C);
// Backend::fp8_amax and fp8_cast_with_amax (amax, scales: host floats)
void fp8_amax(float* amax, const float* x, int64_t n);
void fp8_cast_with_amax(uint8_t* q, float* scales, const float* x, int64_t n, const float* amax);
void matmul_forward_fp8(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                        const uint8_t* w_copy);
void matmul_backward_fp8(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, int N, int C, int OC, const uint8_t* w_copy);

// Causal self-attention on packed qkv (B,T,(NH + 2 NKV) hs) = [q | k | v]: NH query heads and
// NKV key/value heads (grouped-query attention: query head h reads key/value head h / (NH/NKV);
// NKV = NH is multi-head attention, where qkv is (B,T,3C)), each head hs = C/NH channels.
// out (B,T,C); lse (B,NH,T) = log-sum-exp of each score row, saved so backward recomputes
// probabilities instead of storing (T,T) per head.
// With positions (pos, above), row t's keys are [t - pos[t], t]: documents never attend across.
template <typename F>
void attention_forward(F* out, F* lse, const F* qkv, int B, int T, int C, int NH, int NKV,
                       const int32_t* pos = nullptr);
template <typename F>
void attention_backward(F* dqkv, const F* dout, const F* qkv, const F* lse, int B, int T, int C,
                        int NH, int NKV, const int32_t* pos = nullptr);

// out = in x keep / (1 - p) over N rows of C (ld apart), keep as DeviceOps::dropout says.
template <typename F>
void dropout(F* out, const F* in, int64_t N, int C, int64_t ld, float p, uint64_t key, uint64_t row0, int64_t cols,
             int64_t col0);

// y[n * ldy + c] += alpha * x[n * ldx + c] for n < N, c < C (strided rows: a column slice).
template <typename F>
void add_rows_scaled(F* y, int64_t ldy, const F* x, int64_t ldx, int64_t N, int C, F alpha);

// RMSNorm (Llama): out (N,C) = inp * rstd * weight, rstd (N) = 1 / sqrt(mean(inp^2) + eps),
// saved for backward.
template <typename F>
void rmsnorm_forward(F* out, F* rstd, const F* inp, const F* weight, int N, int C, float eps);
template <typename F>
void rmsnorm_backward(F* dinp, F* dweight, const F* dout, const F* inp, const F* weight,
                      const F* rstd, int N, int C);

// RMSNorm of each head (Qwen3's q_norm, k_norm): rows of hs channels, the first `heads` of each
// of N rows `stride` elements apart, one weight (hs) shared by the heads; rstd (N, heads). out
// may be inp and dinp may be dout (in place); dinp is written, dweight accumulates.
template <typename F>
void head_rmsnorm_forward(F* out, F* rstd, const F* inp, const F* weight, int64_t N, int heads, int hs,
                          int64_t stride, float eps);
template <typename F>
void head_rmsnorm_backward(F* dinp, F* dweight, const F* dout, const F* inp, const F* weight, const F* rstd,
                           int64_t N, int heads, int hs, int64_t stride);

// Rotary position embedding, in place, on the first n_heads heads (hs channels each) of every
// (b, t) row of x, rows `stride` elements apart: position t rotates channel pairs (i, i + hs/2)
// by the angle t * theta^(-2i/hs), i < hs/2. This is the Hugging Face (GPT-NeoX) convention
// that rotates the two halves of each head; Meta's original Llama code rotates adjacent pairs
// (2i, 2i+1) instead, which Hugging Face's conversion script absorbs by permuting the rows of
// q_proj and k_proj. We follow Hugging Face, so its weights load unpermuted. inverse = true
// rotates by the negative angle: the backward of the rotation, which is orthogonal. With
// positions (pos, above) the angle is pos[b,t] * theta^(-2i/hs). `scaling`: the frequencies of
// Llama 3.1's rule instead (engine/backend/rope_scaling.h).
template <typename F>
void rope(F* x, int B, int T, int n_heads, int hs, int64_t stride, float theta, bool inverse,
          const int32_t* pos = nullptr, const RopeScaling& scaling = {});

// SwiGLU (Llama's MLP): inp (N, 2F) holds [gate | up] per row; out (N,F) = silu(gate) * up.
template <typename F>
void swiglu_forward(F* out, const F* inp, int64_t N, int F_);
template <typename F>
void swiglu_backward(F* dinp, const F* inp, const F* dout, int64_t N, int F_);  // (dinp written)

// GELU, tanh approximation (GPT-2): out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <typename F>
void gelu_forward(F* out, const F* inp, int64_t n);
template <typename F>
void gelu_backward(F* dinp, const F* inp, const F* dout, int64_t n);  // (dinp written; may be dout)

// Fused softmax cross-entropy over logits (N,V): losses (N) = logsumexp(row) - row[target].
// A negative target (-1: a prompt token, padding, a document's end) carries no loss: its loss is
// 0 and its gradient row 0, in this op and in the vocabulary-parallel ones below.
// When grad_scale != 0, overwrites logits with dlogits = (softmax - onehot(target)) * grad_scale,
// so the probability tensor never exists separately. Columns [Vr, V) of each row are padding
// (the vocabulary padded for tensor parallelism and vector access): they take no part in the
// softmax and their gradient is written exactly 0 (here, not through a -inf bias on the logits).
template <typename F>
void softmax_crossentropy(F* losses, F* logits, const int32_t* targets, int N, int V, int Vr,
                          F grad_scale);

// Vocabulary-parallel cross-entropy (Megatron): this rank holds logits (N,V) for the vocabulary
// slice [v0, v0 + V), its first Vr columns real (0 <= Vr <= V). The caller reduces max /
// sum-of-exp / target logit over the group between these steps, then loss = lse - target_logit
// with lse = max + log(sum).
template <typename F>
void logits_row_max(F* out_max, const F* logits, int N, int V, int Vr);  // (N); -inf when Vr = 0
template <typename F>
void logits_row_sumexp(F* out_sum, const F* logits, const F* row_max, int N, int V, int Vr);  // (N)
// out (N) = logits[n, targets[n] - v0] when the target is in this slice, else 0
template <typename F>
void logits_pick_target(F* out, const F* logits, const int32_t* targets, int N, int V, int v0);
// logits (N,V) <- (softmax - onehot(target)) * grad_scale, from the global lse (N); padding 0
template <typename F>
void crossentropy_grad_from_lse(F* logits, const F* lse, const int32_t* targets, int N, int V, int Vr,
                                int v0, F grad_scale);

// Elementwise helpers.
template <typename F>
void add(F* out, const F* a, const F* b, int64_t n);  // out = a + b
template <typename F>
void scale(F* x, F s, int64_t n);  // x *= s
template <typename F>
double sum_squares(const F* x, int64_t n);  // sum x^2, accumulated in double, fixed order

// AdamW step as torch.optim.AdamW: p *= 1 - lr*wd; m,v updated; p -= lr/bc1 * m/(sqrt(v)/sqrt(bc2)+eps)
// with bias corrections bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (t counts from 1).
template <typename F>
void adamw_update(F* params, const F* grads, F* m, F* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t);
// The same on fp32 states, also writing the updated parameters to `compute` (null: not) in `ct`
// (rounded to nearest even) in the same pass.
void adamw_update_with_copy(float* params, const float* grads, float* m, float* v, void* compute, DType ct, int64_t n,
                            float lr, float beta1, float beta2, float eps, float weight_decay, int t);
// Which body adamw_update_with_copy runs: the best this CPU has (AVX-512, else AVX2 + F16C, else
// scalar), or a lesser one (tests and benchmarks compare them); and the name of the one in use.
enum class AdamwBody { Best, Avx2, Scalar };
void force_adamw_body(AdamwBody body);
const char* adamw_body_name();
// The scalar loop alone (the reference the vector bodies of adamw_update_with_copy must equal).
void adamw_update_reference(float* params, const float* grads, float* m, float* v, void* compute, DType ct, int64_t n,
                            float lr, float beta1, float beta2, float eps, float weight_decay, int t);

}  // namespace zt::cpu
