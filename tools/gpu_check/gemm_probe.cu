// The practical GEMM ceiling of this GPU: cuBLASLt on square matrices, bf16 inputs with fp32
// accumulation (the bf16 ceiling MFU is judged against) and fp32 (what ztrain's fp32 path uses);
// then bf16 at GPT-2 124M's own GEMM shapes (micro-batch 64 x 1024 tokens, forward), each as a
// fraction of that ceiling; and the device memory's copy bandwidth. Timed with CUDA events.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

namespace {

// Random inputs in [-1, 1): a product of zeros runs faster than real data (about 13% for bf16 on
// an H200 here), which would inflate the ceiling MFU is judged against.
__global__ void fill_random(void* p, size_t n, bool bf16, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    const float v = float(h & 0xffffff) / float(1 << 23) - 1.0f;
    if (bf16) static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
    else static_cast<float*>(p)[i] = v;
  }
}

#define CK(x) do { auto r_ = (x); if (r_ != 0) { std::printf("{\"check\": \"gemm\", \"error\": \"%s = %d\"}\n", #x, int(r_)); return 0; } } while (0)  // 0: failed

// C (m x n) = A (m x k) B (k x n), column-major as cuBLASLt sees it (ztrain's row-major
// activations times a weight are the same product transposed); returns TFLOP/s, 0 on failure
double measure(cublasLtHandle_t h, cudaDataType_t type, cublasComputeType_t compute, int m, int n, int k,
               const char* name, const char* what, double ceiling) {
  const size_t elt = type == CUDA_R_32F ? 4 : 2;
  void *A, *B, *C, *ws;
  CK(cudaMalloc(&A, size_t(m) * k * elt));
  CK(cudaMalloc(&B, size_t(k) * n * elt));
  CK(cudaMalloc(&C, size_t(m) * n * elt));
  const size_t ws_bytes = 64u << 20;
  CK(cudaMalloc(&ws, ws_bytes));
  fill_random<<<1024, 256>>>(A, size_t(m) * k, elt == 2, 1);
  fill_random<<<1024, 256>>>(B, size_t(k) * n, elt == 2, 2);
  CK(cudaGetLastError());
  cublasLtMatmulDesc_t desc;
  CK(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F));
  cublasLtMatrixLayout_t la, lb, lc;
  CK(cublasLtMatrixLayoutCreate(&la, type, m, k, m));
  CK(cublasLtMatrixLayoutCreate(&lb, type, k, n, k));
  CK(cublasLtMatrixLayoutCreate(&lc, type, m, n, m));
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &heur, &found));
  const float alpha = 1, beta = 0;
  auto run = [&] { return cublasLtMatmul(h, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &heur.algo, ws, ws_bytes, 0); };
  for (int i = 0; i < 3; ++i) CK(run());
  const double flops = 2.0 * m * double(n) * k;
  const int iters = std::max(5, std::min(200, int(2e13 / flops)));  // about 20 ms at 1 PFLOP/s
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  for (int i = 0; i < iters; ++i) CK(run());
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  const double s = ms / 1e3 / iters, tflops = flops / s / 1e12;
  std::printf("{\"check\": \"gemm\", \"type\": \"%s\", \"what\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, "
              "\"ms\": %.3f, \"tflops\": %.1f", name, what, m, n, k, s * 1e3, tflops);
  if (ceiling > 0) std::printf(", \"of_ceiling\": %.3f", tflops / ceiling);
  std::printf("}\n");
  std::fflush(stdout);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  cudaFree(ws);
  return tflops;
}

// Device-to-device copy of 2 GiB: read + write bytes per second (what memory-bound kernels such
// as layernorm, AdamW and the embedding can reach)
double bandwidth() {
  const size_t bytes = size_t(2) << 30;
  void *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 1, bytes));
  CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const int iters = 10;
  CK(cudaEventRecord(e0));
  for (int i = 0; i < iters; ++i) CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  std::printf("{\"check\": \"memory_bandwidth\", \"bytes\": %zu, \"ms\": %.3f, \"gb_per_s\": %.0f}\n", bytes,
              ms / iters, 2.0 * bytes * iters / (ms / 1e3) / 1e9);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes * iters / (ms / 1e3) / 1e9;
}

}  // namespace

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::puts("{\"skip\": \"no CUDA device visible\"}");
    return 77;
  }
  cublasLtHandle_t h;
  if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) {  // not CK: its 0 means a failed measurement
    std::puts("{\"check\": \"gemm\", \"error\": \"cublasLtCreate failed\"}");
    return 1;
  }
  const double bf16 = measure(h, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 8192, 8192, 8192, "bf16", "square", 0);
  int rc = bf16 > 0 ? 0 : 1;
  rc |= measure(h, CUDA_R_32F, CUBLAS_COMPUTE_32F, 8192, 8192, 8192, "fp32", "square", 0) > 0 ? 0 : 1;
  rc |= measure(h, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 8192, 8192, 8192, "fp32 (tf32 tensor cores)", "square", 0) > 0
            ? 0 : 1;
  // GPT-2 124M's forward GEMMs at 65536 token rows (m: output features, n: tokens, k: input features)
  const int rows = 65536;
  const struct { int m, k; const char* what; } shapes[] = {
      {2304, 768, "qkv"}, {768, 768, "attention projection"}, {3072, 768, "mlp up"},
      {768, 3072, "mlp down"}, {50304, 768, "head (whole)"}};
  for (const auto& sh : shapes)
    rc |= measure(h, CUDA_R_16BF, CUBLAS_COMPUTE_32F, sh.m, rows, sh.k, "bf16", sh.what, bf16) > 0 ? 0 : 1;
  rc |= bandwidth() > 0 ? 0 : 1;
  cublasLtDestroy(h);
  return rc;
}
