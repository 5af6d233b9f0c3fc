// Linear layers on cuBLASLt. Row-major (N, C) buffers are column-major (C, N) to cuBLAS, so
//   out (N,OC) = inp (N,C) @ W^T      is  out_cm (OC,N) = W_cm^T (OC,C) x inp_cm (C,N)
//   dinp (N,C) += dout (N,OC) @ W     is  dinp_cm (C,N) += W_cm (C,OC) x dout_cm (OC,N)
//   dW (OC,C) += dout^T @ inp         is  dW_cm (C,OC) += inp_cm (C,N) x dout_cm^T (N,OC)
// Compute is fp32 in every precision (CUBLAS_COMPUTE_32F: no TF32 for fp32 inputs, so fp32
// results track the CPU reference; bf16/fp16 inputs accumulate in fp32). The bias broadcasts
// along the n columns of D_cm, i.e. per output feature: cuBLASLt's BIAS epilogue.
#include <cublasLt.h>

#include <array>
#include <cstring>

#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/matmul.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {
void lt_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) fail(__FILE__, __LINE__, what, cublasLtGetStatusString(st));
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
  cudaFree(workspace_);
  cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

bool Gemm::run(const Args& a, cudaStream_t s, bool may_fail) {
  auto lt = static_cast<cublasLtHandle_t>(handle_);
  cublasLtMatmulDesc_t desc;
  lt_check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  const cublasOperation_t opa = a.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = a.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
  const auto epi = cublasLtEpilogue_t(a.epilogue);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (a.bias) {
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &a.bias, sizeof a.bias);
    const cudaDataType_t bt = a.d_type;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
  }
  if (a.aux) {
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &a.aux, sizeof a.aux);
    const int64_t ld = a.aux_ld;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
  }
  cublasLtMatrixLayout_t la, lb, ld;
  lt_check(cublasLtMatrixLayoutCreate(&la, a.ab_type, a.ta ? a.k : a.m, a.ta ? a.m : a.k, a.lda), "layout A");
  lt_check(cublasLtMatrixLayoutCreate(&lb, a.ab_type, a.tb ? a.n : a.k, a.tb ? a.k : a.n, a.ldb), "layout B");
  lt_check(cublasLtMatrixLayoutCreate(&ld, a.d_type, a.m, a.n, a.ldd), "layout D");

  const int al_a = alignment(a.A), al_b = alignment(a.B), al_d = alignment(a.D);
  const Key key{a.ta, a.tb, a.m, a.n, a.k, a.lda, a.ldb, a.ldd, int(a.ab_type) * 64 + int(a.d_type), a.epilogue,
                al_a, al_b, al_d * 2 + (a.beta != 0)};
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    cublasLtMatmulPreference_t pref;
    lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const size_t ws = kWorkspaceBytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    const uint32_t ua = al_a, ub = al_b, ud = al_d;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &ua, sizeof ua);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ub, sizeof ub);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ud, sizeof ud);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ud, sizeof ud);
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &heur, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    std::array<char, 64> bytes{};
    std::memcpy(bytes.data(), &heur.algo, sizeof heur.algo);
    it = algos_.emplace(key, std::make_pair(st == CUBLAS_STATUS_SUCCESS && found > 0, bytes)).first;
  }
  bool ok = it->second.first;
  if (ok) {
    cublasLtMatmulAlgo_t algo;
    std::memcpy(&algo, it->second.second.data(), sizeof algo);
    const float alpha = 1.0f;
    lt_check(cublasLtMatmul(lt, desc, &alpha, a.A, la, a.B, lb, &a.beta, a.D, ld, a.D, ld, &algo, workspace_,
                            kWorkspaceBytes, s),
             "cublasLtMatmul");
  }
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  if (!ok && !may_fail) fail(__FILE__, __LINE__, "cublasLt", "no algorithm for this GEMM");
  return ok;
}

void Gemm::linear_forward(void* out, const void* inp, const void* w, const void* bias, int N, int C, int OC, DType t,
                          cudaStream_t s) {
  Args a;
  a.ta = true;
  a.m = OC, a.n = N, a.k = C;
  a.A = w, a.lda = C, a.B = inp, a.ldb = C, a.D = out, a.ldd = OC;
  a.ab_type = a.d_type = cuda_type(t);
  if (bias) {
    a.epilogue = CUBLASLT_EPILOGUE_BIAS;
    a.bias = bias;
    if (run(a, s, /*may_fail=*/true)) return;
    a.epilogue = CUBLASLT_EPILOGUE_DEFAULT;  // no fused-bias algorithm for this shape: two passes
    a.bias = nullptr;
    run(a, s);
    switch (t) {
      case DType::F32: add_bias(static_cast<float*>(out), static_cast<const float*>(bias), N, OC, s); break;
      case DType::BF16:
        add_bias(static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(bias), N, OC, s);
        break;
      case DType::F16: add_bias(static_cast<__half*>(out), static_cast<const __half*>(bias), N, OC, s); break;
    }
    return;
  }
  run(a, s);
}

bool Gemm::linear_gelu_forward(void* out, void* pre, const void* inp, const void* w, const void* bias, int N, int C,
                               int OC, DType t, cudaStream_t s) {
  if (OC % 8 != 0) return false;  // the aux output's leading dimension must be a multiple of 8
  Args a;
  a.ta = true;
  a.m = OC, a.n = N, a.k = C;
  a.A = w, a.lda = C, a.B = inp, a.ldb = C, a.D = out, a.ldd = OC;
  a.ab_type = a.d_type = cuda_type(t);
  a.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  a.bias = bias;
  a.aux = pre;
  a.aux_ld = OC;
  return run(a, s, /*may_fail=*/true);
}

void Gemm::linear_backward(void* dinp, float* dw, const void* dout, const void* inp, const void* w, int N, int C,
                           int OC, DType t, cudaStream_t s) {
  const cudaDataType_t ct = cuda_type(t);
  if (dinp) {
    Args a;
    a.m = C, a.n = N, a.k = OC;
    a.A = w, a.lda = C, a.B = dout, a.ldb = OC, a.D = dinp, a.ldd = C;
    a.beta = 1.0f;
    a.ab_type = a.d_type = ct;
    run(a, s);
  }
  Args a;  // fp32 weight gradient from compute-type inputs (cuBLASLt's mixed A/B -> D types)
  a.tb = true;
  a.m = C, a.n = OC, a.k = N;
  a.A = inp, a.lda = C, a.B = dout, a.ldb = OC, a.D = dw, a.ldd = C;
  a.beta = 1.0f;
  a.ab_type = ct;
  a.d_type = CUDA_R_32F;
  run(a, s);
}

}  // namespace zt::cuda
