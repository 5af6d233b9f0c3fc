// cuBLASLt GEMMs for the linear layers (see matmul.cu for the layout mapping). Inputs and
// outputs in the compute type (fp32 / bf16 / fp16), weight gradients accumulated in fp32, fp32
// accumulation throughout; bias, GELU, GELU-gradient and bias-gradient epilogues fused where
// cuBLASLt offers them (one pass over the output instead of two or three).
// Chosen by measurement (unless set_autotune(false): [run] deterministic): at the first use of
// each problem the top kCandidates heuristic algorithms are timed on the call's own buffers and
// the fastest is kept; a fused bias, GELU or bias-gradient epilogue is kept only where it beats
// the GEMM plus the separate kernel. Each choice is logged once and reused for the rest of the process.
#pragma once
#include <cuda_runtime.h>
#include <library_types.h>

#include <array>
#include <cstddef>
#include <functional>
#include <map>
#include <tuple>
#include <vector>

#include "engine/core/dtype.h"

namespace zt::cuda {

class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  // out (N,OC) = inp (N,C) @ w^T (w: (OC,C)) + bias (OC, may be null); all of type t
  void linear_forward(void* out, const void* inp, const void* w, const void* bias, int N, int C, int OC, DType t,
                      cudaStream_t s);
  // pre = inp @ w^T + bias; out = gelu(pre): one GEMM with the GELU_AUX_BIAS epilogue where
  // cuBLASLt has one for the shape (and it is faster), else the GEMM and the GELU kernel.
  void linear_gelu_forward(void* out, void* pre, const void* inp, const void* w, const void* bias, int N, int C,
                           int OC, DType t, cudaStream_t s);
  // dinp (N,C; type t; may be null) = dout @ w (written), times gelu'(gelu_pre) when gelu_pre
  // (N,C) is given (the DGELU epilogue); dw (OC,C; fp32) += dout^T @ inp; dbias (OC; fp32; may be
  // null) += column sums of dout, from the weight GEMM's BGRADB epilogue. Where cuBLASLt has no
  // fused algorithm for a shape, the separate kernels run instead. `scratch`:
  // cuda_scratch::matmul_backward(OC, dbias != null) floats (engine/backend/cuda_scratch.h).
  void linear_backward(void* dinp, float* dw, float* dbias, const void* dout, const void* inp, const void* w,
                       const void* gelu_pre, int N, int C, int OC, DType t, float* scratch, cudaStream_t s);

  struct Args {  // D (m,n) = op(A) op(B) [+ beta D] [epilogue], column-major
    bool ta = false, tb = false;
    int m = 0, n = 0, k = 0;
    const void* A = nullptr;
    int lda = 0;
    const void* B = nullptr;
    int ldb = 0;
    void* D = nullptr;
    int ldd = 0;
    float beta = 0;
    cudaDataType_t ab_type = CUDA_R_32F, d_type = CUDA_R_32F;
    int epilogue = 1;  // cublasLtEpilogue_t (1 = CUBLASLT_EPILOGUE_DEFAULT)
    const void* bias = nullptr;  // the bias (BIAS epilogues) or the bias gradient's output (BGRAD*)
    cudaDataType_t bias_type = CUDA_R_32F;
    const void* aux = nullptr;
    int aux_ld = 0;
    // FP8 (E4M3/E5M2 A and B: fp8_linear.cu): B's type where it differs from A's (-1: ab_type), and
    // the tensor-wide scales of A and B (device floats, the inverse quantization scales)
    int b_type = -1;
    const float* a_scale = nullptr;
    const float* b_scale = nullptr;
    // FP8 only: cuBLASLt's fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM: partial sums not
    // promoted to fp32 as often; faster on Hopper, less accurate)
    bool fast_accum = false;
  };
  // False when no algorithm exists and `may_fail`; otherwise failures throw.
  bool run(const Args& a, cudaStream_t s, bool may_fail = false);
  // On (the default): algorithms and fusions chosen by measurement; off: cuBLASLt's first
  // heuristic and every fusion it offers, the same on every machine ([run] deterministic).
  void set_autotune(bool on);
  // Where an accumulating GEMM (beta != 0) is timed: a scratch output from the backend's caching
  // allocator, never cudaMalloc / cudaFree (a cudaFree synchronizes the device, and can deadlock
  // a job with NCCL collectives in flight). Without one, or when it throws (no memory), such a
  // GEMM takes the first heuristic.
  void set_scratch(std::function<void*(size_t)> alloc, std::function<void(void*)> free) {
    scratch_alloc_ = std::move(alloc), scratch_free_ = std::move(free);
  }

  static constexpr int kCandidates = 8;  // heuristic algorithms timed per problem

 private:
  static constexpr size_t kWorkspaceBytes = 32u << 20;
  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_ = nullptr;
  std::function<void*(size_t)> scratch_alloc_;
  std::function<void(void*)> scratch_free_;
  // Everything cuBLASLt needs for one problem (shape, types, epilogue, pointer alignments), made
  // once: the descriptors and the heuristic's algorithm. A call only sets its pointers.
  using Key = std::tuple<int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int>;
  struct Plan {
    void* desc = nullptr;               // cublasLtMatmulDesc_t
    std::array<void*, 3> layouts = {};  // cublasLtMatrixLayout_t of A, B, D
    bool found = false;
    // cublasLtMatmulAlgo_t bytes, the one in use first (the fastest measured, or the first
    // heuristic untuned), then the heuristic's others in its order: an algorithm that fails at
    // run time gives way to the next (run)
    std::vector<std::array<char, 64>> algos;
    int fused = -1;  // with an epilogue: 1 faster than the unfused kernels, 0 not, -1 not timed
  };
  std::map<Key, Plan> plans_;
  bool autotune_ = true;  // (set by set_autotune before every use)
  Plan& plan(const Args& a, cudaStream_t s);
  Key key_of(const Args& a) const;
  // The fastest of n heuristic results for `a` (index), each timed on a's buffers (a scratch D
  // when beta != 0, so that timing accumulates nothing into the real one); `ms` per candidate.
  int fastest(const Args& a, const Plan& p, const void* results, int n, cudaStream_t s, float* ms);
  // Whether the fused GEMM `a` (an epilogue plan that exists) beats `unfused` (the plain GEMM and
  // the separate kernel, on the same buffers); measured once per plan, always true untuned.
  bool fusion_pays(const Args& a, cudaStream_t s, const std::function<void()>& unfused);
  // The same for the bias-gradient epilogue of the accumulating weight GEMM `fused` against
  // `plain` (that GEMM without it) and `column_sums(into)` (dbias += column sums of dout): as both
  // accumulate, they are timed into scratch outputs.
  bool bgradb_pays(Args fused, Args plain, int OC, const std::function<void(float*)>& column_sums, cudaStream_t s);
  float time_ms(cudaStream_t s, const std::function<void()>& fn);  // one warm-up, then the mean of 3
};

}  // namespace zt::cuda
