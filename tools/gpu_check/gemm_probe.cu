// The practical GEMM ceiling of this GPU: cuBLASLt on square matrices, bf16 inputs with fp32
// accumulation (the bf16 ceiling MFU is judged against) and fp32 (what ztrain's fp32 path uses).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
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

#define CK(x) do { auto r_ = (x); if (r_ != 0) { std::printf("{\"check\": \"gemm\", \"error\": \"%s = %d\"}\n", #x, int(r_)); return 1; } } while (0)

int measure(cublasLtHandle_t h, cudaDataType_t type, cublasComputeType_t compute, int n, const char* name) {
  const size_t elt = type == CUDA_R_32F ? 4 : 2;
  void *A, *B, *C, *ws;
  CK(cudaMalloc(&A, size_t(n) * n * elt));
  CK(cudaMalloc(&B, size_t(n) * n * elt));
  CK(cudaMalloc(&C, size_t(n) * n * elt));
  const size_t ws_bytes = 64u << 20;
  CK(cudaMalloc(&ws, ws_bytes));
  fill_random<<<1024, 256>>>(A, size_t(n) * n, elt == 2, 1);
  fill_random<<<1024, 256>>>(B, size_t(n) * n, elt == 2, 2);
  CK(cudaGetLastError());
  cublasLtMatmulDesc_t desc;
  CK(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F));
  cublasLtMatrixLayout_t l;
  CK(cublasLtMatrixLayoutCreate(&l, type, n, n, n));
  cublasLtMatmulPreference_t pref;
  CK(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  CK(cublasLtMatmulAlgoGetHeuristic(h, desc, l, l, l, l, pref, 1, &heur, &found));
  const float alpha = 1, beta = 0;
  auto run = [&] { return cublasLtMatmul(h, desc, &alpha, A, l, B, l, &beta, C, l, C, l, &heur.algo, ws, ws_bytes, 0); };
  for (int i = 0; i < 3; ++i) CK(run());
  cudaDeviceSynchronize();
  const int iters = 20;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) CK(run());
  cudaDeviceSynchronize();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  std::printf("{\"check\": \"gemm\", \"type\": \"%s\", \"n\": %d, \"ms\": %.3f, \"tflops\": %.1f}\n", name, n, s * 1e3,
              2.0 * n * n * double(n) / s / 1e12);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(desc);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  cudaFree(ws);
  return 0;
}

}  // namespace

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::puts("{\"skip\": \"no CUDA device visible\"}");
    return 77;
  }
  cublasLtHandle_t h;
  CK(cublasLtCreate(&h));
  int rc = measure(h, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 8192, "bf16");
  rc |= measure(h, CUDA_R_32F, CUBLAS_COMPUTE_32F, 8192, "fp32");
  rc |= measure(h, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 8192, "fp32 (tf32 tensor cores)");
  cublasLtDestroy(h);
  return rc;
}
