// Attention chosen by measurement, as the GEMMs' algorithms are: where cuDNN's fused attention can
// run a shape (cudnn_attention.h), its first use on the GPU runs cuDNN's and ztrain's kernels
// (a warm-up and 3 timed calls each, CUDA events), compares their results, keeps the faster, and
// says so once on stderr. A disagreement beyond 2% of the largest output (or 0.02 in the
// log-sum-exp) keeps ztrain's kernels and says why. The pass's outputs are the kept one's: it runs
// last. Host code: included by attention.cu only.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "engine/backend/cuda/cudnn_attention.h"
#include "engine/core/dtype.h"

namespace zt::cuda::attention_choice {

enum class Impl { Unmeasured, Own, Cudnn };  // Unmeasured: not yet known for the shape

// A pass's outputs on the host as floats, by name, for the comparison.
using Outputs = std::vector<std::pair<const char*, std::vector<float>>>;

// n elements of type t at device address p, as floats on the host
inline std::vector<float> host_floats(const void* p, size_t n, DType t, cudaStream_t s) {
  std::vector<char> raw(n * dtype_size(t));
  cudaMemcpyAsync(raw.data(), p, raw.size(), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  std::vector<float> out(n);
  convert_host(out.data(), DType::F32, raw.data(), t, int64_t(n));
  return out;
}

// The worst disagreement of `b` against `a`: max |a - b| over max |a| for 16-bit tensors, the
// absolute difference for the log-sum-exp; with its tensor's name.
inline std::pair<double, std::string> disagreement(const Outputs& a, const Outputs& b) {
  std::pair<double, std::string> worst{0.0, ""};
  for (size_t t = 0; t < a.size(); ++t) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < a[t].second.size(); ++i) {
      const double x = a[t].second[i], y = b[t].second[i];
      diff = std::isfinite(x - y) ? std::max(diff, std::fabs(x - y)) : INFINITY;
      scale = std::max(scale, std::fabs(x));
    }
    const bool absolute = std::string(a[t].first) == "lse";
    const double d = absolute ? diff : diff / std::max(scale, 1e-30);
    if (!(d <= worst.first)) worst = {d, a[t].first};
  }
  return worst;
}
constexpr double kAgreement = 0.02;
constexpr int kShapes = 8;  // shapes measured per pass and process (training has one or two)

// Milliseconds per call of fn over 3 calls after a warm-up, by CUDA events on s.
template <typename Fn>
double time_ms(Fn&& fn, cudaStream_t s) {
  fn();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, s);
  for (int i = 0; i < 3; ++i) fn();
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return double(ms) / 3;
}

// Runs the pass with the implementation kept for this shape and direction, measuring at the first
// use. own(): ztrain's kernels; cudnn(): cuDNN's, false when it cannot run; outputs(): the pass's
// results copied to the host. `forced`: ZTRAIN_ATTENTION=cudnn (cuDNN without measuring, ztrain's
// kernels where its plan does not build).
template <typename Own, typename Cudnn, typename Read>
Impl run(const cudnn_attention::Shape& sh, bool backward, bool forced, Own&& own, Cudnn&& cudnn, Read&& outputs,
         cudaStream_t s) {
  static std::map<std::tuple<int, int, int, int, int, bool, bool>, Impl> kept;
  Impl& impl = kept[{sh.B, sh.T, sh.NH, sh.NKV, sh.hs, sh.fp16, backward}];
  if (impl == Impl::Own) return own(), impl;
  if (impl == Impl::Cudnn || forced) {
    if (cudnn()) return impl = Impl::Cudnn;
    return own(), impl = Impl::Own;  // its plan failed: said by cudnn_attention
  }
  // at most kShapes shapes measured a pass: past them ztrain's kernels run the rest (said once)
  static int measured = 0;
  if (measured >= kShapes) {
    static bool said = false;
    if (!said) std::fprintf(stderr, "attention: %d shapes measured for the %s: ztrain's kernels run the others\n",
                            kShapes, backward ? "backward" : "forward");
    said = true;
    return own(), impl = Impl::Own;
  }
  ++measured;
  // the first use: cuDNN's, when it runs at all, then ztrain's, each timed; the kept one last
  bool ran = true;
  const double cudnn_ms = time_ms([&] { ran = cudnn() && ran; }, s);
  if (!ran) return own(), impl = Impl::Own;  // said by cudnn_attention already
  const Outputs theirs = outputs();
  const double own_ms = time_ms(own, s);
  const Outputs ours = outputs();
  const auto [apart, where] = disagreement(ours, theirs);
  const char* pass = backward ? "backward" : "forward";
  char shape[160];
  std::snprintf(shape, sizeof shape, "B %d T %d heads %d/%d of %d %s", sh.B, sh.T, sh.NH, sh.NKV, sh.hs,
                sh.fp16 ? "fp16" : "bf16");
  if (!(apart <= kAgreement)) {
    std::fprintf(stderr, "attention %s, %s: cuDNN's %s is %.3g from ztrain's kernels' (more than %.2g): ztrain's kept\n",
                 pass, shape, where.c_str(), apart, kAgreement);
    return impl = Impl::Own;  // ztrain's ran last
  }
  impl = cudnn_ms < own_ms ? Impl::Cudnn : Impl::Own;
  std::fprintf(stderr, "attention %s, %s: cuDNN %.3f ms, ztrain's kernels %.3f ms (results %.2g apart): %s kept\n",
               pass, shape, cudnn_ms, own_ms, apart, impl == Impl::Cudnn ? "cuDNN" : "ztrain's");
  if (impl == Impl::Cudnn) cudnn();
  return impl;
}

}  // namespace zt::cuda::attention_choice
