// The attention entry points: cuDNN's fused attention or ztrain's kernels (attention.cu), chosen
// by measurement at each shape's first use (attention_choice.h) where cuDNN can run it.
#include <cstdio>
#include <string>
#include <type_traits>

#include "engine/backend/cuda/attention_choice.h"
#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/cudnn_attention.h"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {

template <typename T>
cudnn_attention::Shape shape_of(int B, int T_, int C, int NH, int NKV) {
  return {B, T_, NH, NKV, C / NH, std::is_same_v<T, __half>};
}

// Whether cuDNN is tried for this call: not under ZTRAIN_ATTENTION naming ztrain's kernels, nor
// with documents (its graph has no document mask), nor under [run] deterministic (a choice by
// timing could differ between runs). Under ZTRAIN_ATTENTION=cudnn a call cuDNN cannot run is said
// once per pass and runs on ztrain's kernels.
bool cudnn_tried(const cudnn_attention::Shape& sh, const int32_t* pos, bool deterministic, bool backward) {
  const std::string& choice = attention_kernels_choice();
  const bool forced = choice == "cudnn";
  if (!forced && !choice.empty()) return false;
  std::string why = cudnn_attention::unavailable(sh);
  if (why.empty() && pos) why = "packed documents (its graph has no document mask)";
  // training's shapes; not generation's lengths, one more each token (a plan and a measurement each)
  if (why.empty() && sh.T % 64 != 0) why = "a sequence length not a multiple of 64";
  if (why.empty() && deterministic) why = "[run] deterministic";
  static bool said[2] = {false, false};
  if (forced && !why.empty() && !said[backward])
    std::fprintf(stderr, "attention: ZTRAIN_ATTENTION=cudnn, but cuDNN cannot run the %s for B %d T %d heads %d/%d of %d: "
                 "%s; ztrain's kernels run it\n", backward ? "backward" : "forward", sh.B, sh.T, sh.NH, sh.NKV, sh.hs,
                 why.c_str());
  said[backward] = said[backward] || (forced && !why.empty());
  return why.empty();
}

}  // namespace

template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int NKV, const int32_t* pos,
                       float* scratch, int64_t scratch_floats, bool deterministic, cudaStream_t s) {
  if constexpr (sizeof(T) == 2) {
    const cudnn_attention::Shape sh = shape_of<T>(B, T_, C, NH, NKV);
    const DType dtype = sh.fp16 ? DType::F16 : DType::BF16;
    if (B * T_ > 0 && cudnn_tried(sh, pos, deterministic, /*backward=*/false)) {
      attention_choice::run(
          sh, /*backward=*/false, attention_kernels_choice() == "cudnn",
          [&] { attention_forward_own(out, lse, qkv, B, T_, C, NH, NKV, pos, s); },
          [&] { return cudnn_attention::forward(sh, out, lse, qkv, scratch, scratch_floats, s); },
          [&] {
            return attention_choice::Outputs{
                {"out", attention_choice::host_floats(out, size_t(B) * T_ * C, dtype, s)},
                {"lse", attention_choice::host_floats(lse, size_t(B) * NH * T_, DType::F32, s)}};
          },
          s);
      return;
    }
  }
  attention_forward_own(out, lse, qkv, B, T_, C, NH, NKV, pos, s);
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* out, const T* qkv, const float* lse, int B, int T_, int C,
                        int NH, int NKV, const int32_t* pos, float* scratch, int64_t scratch_floats, bool deterministic,
                        cudaStream_t s) {
  if constexpr (sizeof(T) == 2) {
    const cudnn_attention::Shape sh = shape_of<T>(B, T_, C, NH, NKV);
    const DType dtype = sh.fp16 ? DType::F16 : DType::BF16;
    if (B * T_ > 0 && cudnn_tried(sh, pos, deterministic, /*backward=*/true)) {
      const size_t rows = size_t(B) * T_ * (C + 2 * NKV * (C / NH));
      attention_choice::run(
          sh, /*backward=*/true, attention_kernels_choice() == "cudnn",
          [&] { attention_backward_own(dqkv, dout, out, qkv, lse, B, T_, C, NH, NKV, pos, scratch, deterministic, s); },
          [&] { return cudnn_attention::backward(sh, dqkv, dout, out, qkv, lse, scratch, scratch_floats, s); },
          [&] {  // dQ, dK and dV apart: each within its own scale
            const std::vector<float> all = attention_choice::host_floats(dqkv, rows, dtype, s);
            const int hs = C / NH, C3 = C + 2 * NKV * hs;
            attention_choice::Outputs o{{"dq", {}}, {"dk", {}}, {"dv", {}}};
            for (size_t r = 0; r < rows / size_t(C3); ++r)
              for (int c = 0; c < C3; ++c) o[c < C ? 0 : c < C + NKV * hs ? 1 : 2].second.push_back(all[r * C3 + c]);
            return o;
          },
          s);
      return;
    }
  }
  attention_backward_own(dqkv, dout, out, qkv, lse, B, T_, C, NH, NKV, pos, scratch, deterministic, s);
}

#define ZT_INSTANTIATE(T)                                                                                     \
  template void attention_forward<T>(T*, float*, const T*, int, int, int, int, int, const int32_t*, float*,  \
                                     int64_t, bool, cudaStream_t);                                            \
  template void attention_backward<T>(T*, const T*, const T*, const T*, const float*, int, int, int, int, int, \
                                      const int32_t*, float*, int64_t, bool, cudaStream_t);
ZT_INSTANTIATE(float)
ZT_INSTANTIATE(__nv_bfloat16)
ZT_INSTANTIATE(__half)
#undef ZT_INSTANTIATE

}  // namespace zt::cuda
