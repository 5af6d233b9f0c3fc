// The CUDA backend's scratch, in one place: the partial sums it allocates at start-up and how many
// fp32 elements each op asks of its one scratch buffer (engine/backend/cuda/cuda_backend.cu grows it to the largest request), so
// that the planner (engine/plan/plan_backend.cpp), planning for a GPU, counts exactly what the
// backend allocates. Plain C++: the CUDA backend's layouts it needs are plain C++ too.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/backend/cuda/attention_fa2_layout.h"
#include "engine/backend/cuda/embedding_sort.h"
#include "engine/backend/fp8_recipe.h"

namespace zt::cuda_scratch {

// The sum ops' (the gradient norm's sum of squares) per-block partial sums: at most this many
// blocks, the grid set by the tensor's size alone, so a fixed summation order. Allocated once,
// when the backend starts (not from the scratch buffer).
constexpr int kSumBlocks = 1024;
constexpr size_t sum_partials_bytes() { return size_t(kSumBlocks) * sizeof(double); }

// Column sums over rows (a bias gradient, LayerNorm's and RMSNorm's weight gradients) are split
// into this many row chunks, summed in chunk order at the end: deterministic, no atomics.
constexpr int kColumnChunks = 32;
// The chunks' partial sums: two rows of partials (weight and bias) per chunk, C columns.
constexpr int64_t column_sums(int C) { return int64_t(2) * kColumnChunks * C; }

constexpr int64_t layernorm_backward(int C) { return column_sums(C); }
constexpr int64_t rmsnorm_backward(int C) { return column_sums(C); }
// The bias gradient's partials; none without a bias (the LM head's OC is the vocabulary).
constexpr int64_t matmul_backward(int OC, bool bias) { return bias ? column_sums(OC) : 0; }
// [run] deterministic: the rows' sort keys (token, position) of the ordered embedding backward.
constexpr int64_t embedding_backward(int64_t rows, bool deterministic) {
  return deterministic ? cuda::embedding_sort_scratch_floats(rows) : 0;
}
// cuDNN's fused attention (engine/backend/cuda/cudnn_attention.h), where it runs instead of
// ztrain's kernels, takes its engine's workspace from the same scratch: its forward engines ask
// for a few hundred bytes or none, and its backward keeps the same fp32 dQ accumulator and D as
// FlashAttention-2's, each on a 256-byte boundary, then its engine's workspace (256 bytes with
// as many key/value heads as query heads; grouped heads ask for more and keep ztrain's kernels).
constexpr int64_t kCudnnAttentionWorkspaceFloats = 1024;
constexpr int64_t attention_forward() { return kCudnnAttentionWorkspaceFloats; }
constexpr int64_t round64(int64_t floats) { return (floats + 63) / 64 * 64; }
// cuDNN's backward: the fp32 dQ accumulator (B, T, C) and softmax_sum (B, NH, T), each on a
// 256-byte boundary; its engine's workspace after them
constexpr int64_t cudnn_attention_backward_fixed(int B, int T, int C, int NH) {
  return round64(int64_t(B) * T * C) + round64(int64_t(B) * NH * T);
}
// Whether cuDNN's backward may run a call (attention_select.cu tries it only so; the reserve
// below must then hold it)
constexpr bool cudnn_attention_may_run(int C, int NH, size_t elem, bool deterministic) {
  return elem == 2 && !deterministic && (C / NH) % 8 == 0 && C / NH <= 128;
}
// The attention backward's scratch: FlashAttention-2's (D and, where it accumulates dQ in fp32,
// the (B, T, C) accumulator), or cuDNN's where that is larger and cuDNN may run.
constexpr int64_t attention_backward(int B, int T, int C, int NH, size_t elem, bool deterministic) {
  const int64_t own = cuda::fa2::backward_scratch_floats(B, T, C, NH, elem, deterministic);
  const int64_t cudnn = cudnn_attention_backward_fixed(B, T, C, NH) + kCudnnAttentionWorkspaceFloats;
  return cudnn_attention_may_run(C, NH, elem, deterministic) && cudnn > own ? cudnn : own;
}

// FP8 linear layers: the scales and FP8 copies (fp8_recipe.h), and the backward's bias-gradient
// partials after them.
// a weight's FP8 copy: its amax's block maxima
constexpr int64_t fp8_weight_copy() { return fp8_recipe::kScalarsBytes / 4; }
constexpr int64_t fp8_amax() { return fp8_recipe::kScalarsBytes / 4; }  // its block maxima
constexpr int64_t matmul_forward_fp8(int N, int C, int OC) { return fp8_recipe::forward_scratch_bytes(N, C, OC) / 4; }
constexpr int64_t matmul_backward_fp8(int N, int C, int OC, bool bias) {
  return fp8_recipe::backward_scratch_bytes(N, C, OC) / 4 + matmul_backward(OC, bias);
}

}  // namespace zt::cuda_scratch
