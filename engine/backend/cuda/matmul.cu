// Linear layers on cuBLASLt. Row-major (N, C) buffers are column-major (C, N) to cuBLAS, so
//   out (N,OC) = inp (N,C) @ W^T      is  out_cm (OC,N) = W_cm^T (OC,C) x inp_cm (C,N)
//   dinp (N,C) += dout (N,OC) @ W     is  dinp_cm (C,N) += W_cm (C,OC) x dout_cm (OC,N)
//   dW (OC,C) += dout^T @ inp         is  dW_cm (C,OC) += inp_cm (C,N) x dout_cm^T (N,OC)
// Compute is fp32 in every precision (CUBLAS_COMPUTE_32F: no TF32 for fp32 inputs, so fp32
// results track the CPU reference; bf16/fp16 inputs accumulate in fp32). The bias broadcasts
// along the n columns of D_cm, i.e. per output feature: cuBLASLt's BIAS epilogue. In backward,
// DGELU multiplies dinp by gelu'(pre) (aux input) as it is written, and BGRADB sums dout over the
// tokens (the weight GEMM's k) into the bias gradient: neither needs its own pass over memory.
#include <cublasLt.h>

#include <array>
#include <cstdio>
#include <functional>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/matmul.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {
// ZTRAIN_GEMM_EPILOGUES=off: no fused epilogue (separate bias, GELU and bias-gradient kernels), so
// the GPU check can measure what the fusions gain.
bool fused_epilogues() {
  static const bool on = [] {
    const char* v = std::getenv("ZTRAIN_GEMM_EPILOGUES");
    return !(v && std::string(v) == "off");
  }();
  return on;
}
// ZTRAIN_GEMM_AUTOTUNE=off: cuBLASLt's first heuristic and every fusion it offers, as under
// [run] deterministic (the race check compares two runs bit for bit, and a fused epilogue rounds
// otherwise than the separate kernel: timing may choose differently in each run).
bool autotune_allowed() {
  static const bool on = [] {
    const char* v = std::getenv("ZTRAIN_GEMM_AUTOTUNE");
    return !(v && std::string(v) == "off");
  }();
  return on;
}
// cuBLASLt does not document how accurately its GELU epilogues compute tanh. With a fast
// instruction (tanh.approx.f32: 2^-11 relative, PTX ISA) fp32 results leave the 1e-4 the fp32
// path promises, and DGELU's derivative, which amplifies the error by up to ~3x at |x| ~ 2, leaves
// fp16's one-ulp (2^-10) bound: the emulated device models that error, and test-backend-ops fails
// there with those fusions on. bf16's rounding (2^-7) absorbs it, so only bf16 fuses GELU.
bool gelu_fusable(DType t) { return t == DType::BF16; }
void lt_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) fail(__FILE__, __LINE__, what, cublasLtGetStatusString(st));
}
const char* epilogue_name(int e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
    default: return "other";
  }
}
cudaDataType_t cuda_type(DType t) {
  return t == DType::F32 ? CUDA_R_32F : t == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
}
// Largest power of two (<= 256) dividing the address: cuBLASLt picks kernels by the alignment
// it is promised, so it is told the truth.
int alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 1 && a % al) al /= 2;
  return p ? al : 256;
}
}  // namespace

static_assert(sizeof(cublasLtMatmulAlgo_t) <= 64, "algo storage");

Gemm::Gemm() {
  lt_check(cublasLtCreate(reinterpret_cast<cublasLtHandle_t*>(&handle_)), "cublasLtCreate");
  ZT_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) {
    for (void* l : p.layouts) cublasLtMatrixLayoutDestroy(static_cast<cublasLtMatrixLayout_t>(l));
    cublasLtMatmulDescDestroy(static_cast<cublasLtMatmulDesc_t>(p.desc));
  }
  cudaFree(workspace_);
  cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

void Gemm::set_autotune(bool on) { autotune_ = on && autotune_allowed(); }

// FP8's tensor-wide scales of A and B (device pointers; each call's own)
static void set_scales(cublasLtMatmulDesc_t desc, const Gemm::Args& a) {
  if (a.a_scale) cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a.a_scale, sizeof a.a_scale);
  if (a.b_scale) cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a.b_scale, sizeof a.b_scale);
}

Gemm::Key Gemm::key_of(const Args& a) const {
  const int al_a = alignment(a.A), al_b = alignment(a.B), al_d = alignment(a.D);
  // the heuristic also reads the bias and aux pointers' alignment from the descriptor
  const int al_epi = alignment(a.bias) * 512 + alignment(a.aux);
  return Key{a.ta * 2 + a.tb, a.m, a.n, a.k, a.lda, a.ldb, a.ldd, int(a.ab_type) * 64 + int(a.d_type),
             a.epilogue, int(a.bias_type), a.aux_ld, al_a, al_b, al_d * 2 + (a.beta != 0), al_epi,
             (a.b_type + 1) * 8 + (a.a_scale != nullptr) * 4 + (a.b_scale != nullptr) * 2 + a.fast_accum};
}

Gemm::Plan& Gemm::plan(const Args& a, cudaStream_t s) {
  const Key key = key_of(a);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const int al_a = alignment(a.A), al_b = alignment(a.B), al_d = alignment(a.D);
  Plan p;
  cublasLtMatmulDesc_t desc;
  lt_check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  p.desc = desc;
  const cublasOperation_t opa = a.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = a.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
  const auto epi = cublasLtEpilogue_t(a.epilogue);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (a.bias) cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &a.bias_type, sizeof a.bias_type);
  if (a.aux) {
    const int64_t ld = a.aux_ld;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
  }
  // the pointers the heuristic sees (their alignment is in the key); each call sets its own
  if (a.bias) cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &a.bias, sizeof a.bias);
  if (a.aux) cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &a.aux, sizeof a.aux);
  set_scales(desc, a);
  if (a.fast_accum) {
    const int8_t on = 1;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &on, sizeof on);
  }
  const cudaDataType_t b_type = a.b_type < 0 ? a.ab_type : cudaDataType_t(a.b_type);
  cublasLtMatrixLayout_t la, lb, ld;
  lt_check(cublasLtMatrixLayoutCreate(&la, a.ab_type, a.ta ? a.k : a.m, a.ta ? a.m : a.k, a.lda), "layout A");
  lt_check(cublasLtMatrixLayoutCreate(&lb, b_type, a.tb ? a.n : a.k, a.tb ? a.k : a.n, a.ldb), "layout B");
  lt_check(cublasLtMatrixLayoutCreate(&ld, a.d_type, a.m, a.n, a.ldd), "layout D");
  p.layouts = {la, lb, ld};

  cublasLtMatmulPreference_t pref;
  lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  const size_t ws = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  const uint32_t ua = al_a, ub = al_b, ud = al_d;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &ua, sizeof ua);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ub, sizeof ub);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ud, sizeof ud);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ud, sizeof ud);
  std::array<cublasLtMatmulHeuristicResult_t, kCandidates> heur{};
  int found = 0;
  // (untuned too: the others are the fallbacks of an algorithm that fails at run time)
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), desc, la, lb, ld,
                                                           ld, pref, kCandidates, heur.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  p.found = st == CUBLAS_STATUS_SUCCESS && found > 0;
  std::array<float, kCandidates> ms{};
  const int best = p.found && found > 1 && autotune_ ? fastest(a, p, heur.data(), found, s, ms.data()) : 0;
  for (int i = 0; p.found && i < found; ++i) {
    std::array<char, 64> bytes{};
    std::memcpy(bytes.data(), &heur[i].algo, sizeof heur[i].algo);
    p.algos.insert(i == best ? p.algos.begin() : p.algos.end(), bytes);
  }
  // once per plan: which algorithm, and which fusions this GPU really gets
  const char* types = a.ab_type == CUDA_R_32F    ? "fp32"
                      : a.ab_type == CUDA_R_16BF ? "bf16"
                      : a.ab_type == CUDA_R_16F  ? "fp16"
                      : b_type == CUDA_R_8F_E5M2 ? "FP8 E4M3 x E5M2"
                      : a.ab_type == CUDA_R_8F_E5M2 ? "FP8 E5M2 x E4M3" : "FP8 E4M3";
  const std::string what = a.epilogue == CUBLASLT_EPILOGUE_DEFAULT ? "" : std::string(" ") + epilogue_name(a.epilogue);
  char choice[160];
  if (!p.found)
    std::snprintf(choice, sizeof choice, "no algorithm%s", what.empty() ? "" : ": separate kernels instead");
  else if (found > 1 && autotune_)
    std::snprintf(choice, sizeof choice, "algorithm %d of %d by measurement, %.3f ms (the first heuristic's %.3f ms)",
                  best + 1, found, ms[best], ms[0]);
  else
    std::snprintf(choice, sizeof choice, "%s", autotune_ ? "the only heuristic result" : "the first heuristic ([run] deterministic)");
  std::fprintf(stderr, "cuBLASLt: m %d n %d k %d, %s inputs%s%s: %s\n", a.m, a.n, a.k, types,
               a.beta != 0 ? ", accumulating" : "", what.c_str(), choice);
  return plans_.emplace(key, p).first->second;
}

float Gemm::time_ms(cudaStream_t s, const std::function<void()>& fn) {
  cudaEvent_t e0, e1;
  ZT_CUDA_CHECK(cudaEventCreate(&e0));
  ZT_CUDA_CHECK(cudaEventCreate(&e1));
  fn();  // warm-up, and the first-use choices of what fn runs
  ZT_CUDA_CHECK(cudaEventRecord(e0, s));
  for (int r = 0; r < 3; ++r) fn();
  ZT_CUDA_CHECK(cudaEventRecord(e1, s));
  ZT_CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms / 3;
}

int Gemm::fastest(const Args& a, const Plan& p, const void* results, int n, cudaStream_t s, float* ms) {
  const auto* h = static_cast<const cublasLtMatmulHeuristicResult_t*>(results);
  void* D = a.D;
  void* scratch = nullptr;  // an accumulating GEMM is timed into scratch: the real D must not change
  if (a.beta != 0.0f) {
    const size_t bytes = size_t(a.ldd) * size_t(a.n) * (a.d_type == CUDA_R_32F ? 4 : 2);
    try {
      if (scratch_alloc_) scratch = scratch_alloc_(bytes);
    } catch (const std::exception&) {  // no room to time in
    }
    if (!scratch) {  // the first heuristic
      for (int i = 0; i < n; ++i) ms[i] = -1;
      return 0;
    }
    D = scratch;
  }
  auto desc = static_cast<cublasLtMatmulDesc_t>(p.desc);
  auto la = static_cast<cublasLtMatrixLayout_t>(p.layouts[0]), lb = static_cast<cublasLtMatrixLayout_t>(p.layouts[1]),
       ld = static_cast<cublasLtMatrixLayout_t>(p.layouts[2]);
  const float alpha = 1.0f;
  int best = 0;
  for (int i = 0; i < n; ++i) {
    ms[i] = -1;
    if (h[i].state != CUBLAS_STATUS_SUCCESS) continue;
    bool ok = true;
    const float t = time_ms(s, [&] {
      ok = ok && cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), desc, &alpha, a.A, la, a.B, lb, &a.beta, D, ld,
                                D, ld, &h[i].algo, workspace_, kWorkspaceBytes, s) == CUBLAS_STATUS_SUCCESS;
    });
    if (!ok) continue;
    ms[i] = t;
    if (ms[best] < 0 || t < ms[best]) best = i;
  }
  if (scratch) scratch_free_(scratch);  // back to the cache, reused in stream order
  return best;
}

bool Gemm::fusion_pays(const Args& a, cudaStream_t s, const std::function<void()>& unfused) {
  Plan& p = plan(a, s);  // (std::map: the reference outlives the plans the timing adds)
  if (!p.found) return false;
  if (!autotune_) return true;
  if (p.fused < 0) {
    const float fused_ms = time_ms(s, [&] { run(a, s); });
    const float plain_ms = time_ms(s, unfused);
    p.fused = fused_ms <= plain_ms ? 1 : 0;
    std::fprintf(stderr, "cuBLASLt: %s epilogue for m %d n %d k %d: %s by measurement (fused %.3f ms, the GEMM and "
                 "a kernel %.3f ms)\n", epilogue_name(a.epilogue), a.m, a.n, a.k,
                 p.fused ? "fused" : "separate kernels", fused_ms, plain_ms);
  }
  return p.fused == 1;
}

bool Gemm::bgradb_pays(Args fused, Args plain, int OC, const std::function<void(float*)>& column_sums,
                       cudaStream_t s) {
  Plan& p = plan(fused, s);
  if (!p.found) return false;  // no fused algorithm for this shape
  if (!autotune_) return true;
  if (p.fused >= 0) return p.fused == 1;
  plan(plain, s);  // made (its algorithms timed in a scratch of their own) before this scratch is taken
  // Both accumulate (the GEMM into dw, the column sums into dbias): timed into a scratch D and
  // bias gradient, the real ones untouched; one allocation of (ldd n + OC) floats, as the planner
  // counts (PlanBackend::autotune_scratch).
  const size_t d_floats = size_t(fused.ldd) * size_t(fused.n);
  float* buf = nullptr;
  try {
    if (scratch_alloc_) buf = static_cast<float*>(scratch_alloc_((d_floats + size_t(OC)) * sizeof(float)));
  } catch (const std::exception&) {  // no room to time in
  }
  if (!buf) {
    p.fused = 1;
    std::fprintf(stderr, "cuBLASLt: BGRADB epilogue for m %d n %d k %d: fused, untimed (no memory to time in)\n",
                 fused.m, fused.n, fused.k);
    return true;
  }
  fused.D = plain.D = buf;
  float* dbias = buf + d_floats;  // column_sums writes floats one by one: 4-byte alignment is enough
  const float fused_ms = time_ms(s, [&] { run(fused, s); });
  const float plain_ms = time_ms(s, [&] {
    column_sums(dbias);
    run(plain, s);
  });
  scratch_free_(buf);
  p.fused = fused_ms <= plain_ms ? 1 : 0;
  std::fprintf(stderr, "cuBLASLt: BGRADB epilogue for m %d n %d k %d: %s by measurement (fused %.3f ms, the GEMM and "
               "the column sums %.3f ms)\n", fused.m, fused.n, fused.k, p.fused ? "fused" : "separate kernels", fused_ms,
               plain_ms);
  return p.fused == 1;
}

bool Gemm::run(const Args& a, cudaStream_t s, bool may_fail) {
  Plan& p = plan(a, s);
  if (!p.found) {
    if (!may_fail) fail(__FILE__, __LINE__, "cublasLt", "no algorithm for this GEMM");
    return false;
  }
  auto desc = static_cast<cublasLtMatmulDesc_t>(p.desc);
  if (a.bias) cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &a.bias, sizeof a.bias);
  if (a.aux) cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &a.aux, sizeof a.aux);
  set_scales(desc, a);
  auto la = static_cast<cublasLtMatrixLayout_t>(p.layouts[0]), lb = static_cast<cublasLtMatrixLayout_t>(p.layouts[1]),
       ld = static_cast<cublasLtMatrixLayout_t>(p.layouts[2]);
  const float alpha = 1.0f;
  // A heuristic algorithm may still fail at run time (cuBLASLt refuses it before enqueueing
  // anything): the next one takes its place for this plan, said once; the last failure throws.
  while (true) {
    cublasLtMatmulAlgo_t algo;
    std::memcpy(&algo, p.algos.front().data(), sizeof algo);
    const cublasStatus_t st = cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), desc, &alpha, a.A, la, a.B, lb,
                                             &a.beta, a.D, ld, a.D, ld, &algo, workspace_, kWorkspaceBytes, s);
    if (st == CUBLAS_STATUS_SUCCESS) return true;
    if (p.algos.size() == 1) {
      lt_check(st, "cublasLtMatmul (every heuristic algorithm failed)");  // throws
      return false;
    }
    p.algos.erase(p.algos.begin());
    std::fprintf(stderr, "cuBLASLt: m %d n %d k %d: an algorithm failed at run time (status %d): the next of the "
                 "heuristic's %zu left takes its place\n", a.m, a.n, a.k, int(st), p.algos.size());
  }
}

namespace {
// Runs fn(T{}) with T the storage type of t (for the kernels that stand in for an epilogue).
template <typename Fn>
void with_type(DType t, Fn fn) {
  switch (t) {
    case DType::F32: fn(float{}); break;
    case DType::BF16: fn(__nv_bfloat16{}); break;
    case DType::F16: fn(__half{}); break;
  }
}
}  // namespace

void Gemm::linear_forward(void* out, const void* inp, const void* w, const void* bias, int N, int C, int OC, DType t,
                          cudaStream_t s) {
  Args a;
  a.ta = true;
  a.m = OC, a.n = N, a.k = C;
  a.A = w, a.lda = C, a.B = inp, a.ldb = C, a.D = out, a.ldd = OC;
  a.ab_type = a.d_type = a.bias_type = cuda_type(t);
  if (!bias) {
    run(a, s);
    return;
  }
  const auto unfused = [&] {  // the plain GEMM, then the bias: two passes over out
    run(a, s);
    with_type(t, [&](auto z) {
      using T = decltype(z);
      add_bias(static_cast<T*>(out), static_cast<const T*>(bias), N, OC, s);
    });
  };
  Args fused = a;
  fused.epilogue = CUBLASLT_EPILOGUE_BIAS;
  fused.bias = bias;
  if (fused_epilogues() && fusion_pays(fused, s, unfused)) run(fused, s);
  else unfused();
}

void Gemm::linear_gelu_forward(void* out, void* pre, const void* inp, const void* w, const void* bias, int N, int C,
                               int OC, DType t, cudaStream_t s) {
  const auto unfused = [&] {  // the GEMM (with its bias), then GELU
    linear_forward(pre, inp, w, bias, N, C, OC, t, s);
    with_type(t, [&](auto z) {
      using T = decltype(z);
      gelu_forward(static_cast<T*>(out), static_cast<const T*>(pre), int64_t(N) * OC, s);
    });
  };
  // the aux's leading dimension must be a multiple of 8; GELU epilogues in bf16 only (gelu_fusable)
  if (OC % 8 != 0 || !fused_epilogues() || !gelu_fusable(t)) {
    unfused();
    return;
  }
  Args a;
  a.ta = true;
  a.m = OC, a.n = N, a.k = C;
  a.A = w, a.lda = C, a.B = inp, a.ldb = C, a.D = out, a.ldd = OC;
  a.ab_type = a.d_type = a.bias_type = cuda_type(t);
  a.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  a.bias = bias;
  a.aux = pre;
  a.aux_ld = OC;
  if (fusion_pays(a, s, unfused)) run(a, s);
  else unfused();
}

void Gemm::linear_backward(void* dinp, float* dw, float* dbias, const void* dout, const void* inp, const void* w,
                           const void* gelu_pre, int N, int C, int OC, DType t, float* scratch, cudaStream_t s) {
  const cudaDataType_t ct = cuda_type(t);
  if (dinp) {  // written, not accumulated: no zero-fill before, no read of D
    Args a;
    a.m = C, a.n = N, a.k = OC;
    a.A = w, a.lda = C, a.B = dout, a.ldb = OC, a.D = dinp, a.ldd = C;
    a.ab_type = a.d_type = ct;
    const auto unfused = [&] {  // the plain GEMM, then (in place) GELU's gradient
      run(a, s);
      if (gelu_pre)  // in place: each element is read before it is written
        with_type(t, [&](auto z) {
          using T = decltype(z);
          gelu_backward(static_cast<T*>(dinp), static_cast<const T*>(gelu_pre), static_cast<const T*>(dinp),
                        int64_t(N) * C, s);
        });
    };
    Args fused = a;
    fused.epilogue = CUBLASLT_EPILOGUE_DGELU;
    fused.aux = gelu_pre;
    fused.aux_ld = C;
    // aux ld: a multiple of 8
    if (gelu_pre && C % 8 == 0 && fused_epilogues() && gelu_fusable(t) && fusion_pays(fused, s, unfused))
      run(fused, s);
    else
      unfused();
  }
  if (!dw) return;  // the input gradient alone
  Args a;  // fp32 weight gradient from compute-type inputs (cuBLASLt's mixed A/B -> D types)
  a.tb = true;
  a.m = C, a.n = OC, a.k = N;
  a.A = inp, a.lda = C, a.B = dout, a.ldb = OC, a.D = dw, a.ldd = C;
  a.beta = 1.0f;
  a.ab_type = ct;
  a.d_type = CUDA_R_32F;
  if (dbias) {
    // BGRADB: the column sums of op(B) = dout over k = the N tokens, i.e. the bias gradient, as
    // the GEMM reads dout anyway. It is written, so it goes to scratch and is added to dbias.
    Args fused = a;
    fused.epilogue = CUBLASLT_EPILOGUE_BGRADB;
    fused.bias = scratch;
    fused.bias_type = CUDA_R_32F;
    const auto column_sums = [&](float* into) {  // the alternative: a reduction pass over dout
      with_type(t, [&](auto z) {
        using T = decltype(z);
        bias_backward(into, static_cast<const T*>(dout), N, OC, scratch, s);
      });
    };
    if (fused_epilogues() && bgradb_pays(fused, a, OC, column_sums, s)) {
      run(fused, s);
      add(dbias, dbias, scratch, OC, s);
      return;
    }
    column_sums(dbias);
  }
  run(a, s);
}

}  // namespace zt::cuda
