// cuDNN's fused attention (cuDNN 9's graph API) beside ztrain's own attention kernels, for causal
// self-attention in bf16/fp16 on the packed (B, T, (NH + 2 NKV) hs) qkv the models write. cuDNN is
// loaded at run time (dlopen of libcudnn.so.9: nothing is linked, and a machine without it runs
// ztrain's kernels); the graphs are the composite ones cuDNN's fused flash-attention engines
// match (Q K^T, scale, the causal mask from generated indices, softmax with its statistics, P V;
// backward: D = rowsum(dO O) in the graph, dV = P^T dO, dS = P (dP - D) scale, dK = dS^T Q,
// dQ = dS K through an fp32 accumulator), built once per shape and cached.
//
// Conventions shared with ztrain's kernels, so a forward by one and a backward by the other agree:
// the statistics are the natural-log log-sum-exp of the scaled scores, fp32, (B, NH, T).
//
// On the emulated device (ZT_CUDA_EMULATED) cuDNN is never loaded: ztrain's kernels run there.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace zt::cuda::cudnn_attention {

struct Shape {
  int B, T, NH, NKV, hs;
  bool fp16;  // else bf16
};

// "" when cuDNN can run this shape (loaded, and a head size its graph takes), else why not.
std::string unavailable(const Shape& s);

// Run on `stream`; false (nothing written) when cuDNN cannot: unavailable(s), its plan failed to
// build (said once on stderr), or it needs more workspace than given. lse: fp32 (B, NH, T).
bool forward(const Shape& s, void* out, float* lse, const void* qkv, float* workspace, int64_t workspace_floats,
             cudaStream_t stream);
// The backward's scratch, from the start of `scratch`: the fp32 dQ accumulator (B, NH, T, hs),
// softmax_sum (B, NH, T), then cuDNN's own workspace (cuda_scratch::attention_backward reserves it).
bool backward(const Shape& s, void* dqkv, const void* dout, const void* out, const void* qkv, const float* lse,
              float* scratch, int64_t scratch_floats, cudaStream_t stream);

// Without a GPU (the CI check): whether cuDNN's heuristics find engines for this shape's forward
// and backward graphs on the GPU a cuDNN device description (JSON) names. Needs libcudnn and the
// CUDA driver's stub library; fills `error` when it cannot tell.
struct Support {
  int64_t forward_engines = 0, backward_engines = 0;
  std::string error;
};
Support supported_on(const Shape& s, const std::string& device_json);

}  // namespace zt::cuda::cudnn_attention
