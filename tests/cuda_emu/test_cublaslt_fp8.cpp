// The emulated cuBLASLt's FP8 matrix products (engine/backend/cuda_emu/cublaslt.cpp) against a
// triple loop here: E4M3 and E5M2 operands in Hopper's TN layout, tensor-wide scales for A, B, C
// and D, D's amax, 16-bit, fp32 and FP8 outputs (rounded to nearest even and saturated to the
// largest finite value by engine/core/fp8.h, itself checked against NVIDIA's conversion by
// tests/cuda/fp8_formats_check.cpp), the bias epilogue; a planted wrong scale is caught; and the
// refusals of 3.4.17's FP8 table and requirements. Operand values are chosen so every sum is exact
// in fp32 (a few significant bits, powers-of-two scales): the output's rounding is the only one,
// and results must match bit for bit. One line per case; exit 1 on failure.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cuda_emu/half.h"
#include "engine/core/fp8.h"

namespace {

int g_failures = 0;
void report(const std::string& name, const std::string& problem) {
  std::printf("%s %s%s%s\n", problem.empty() ? "PASS" : "FAIL", name.c_str(), problem.empty() ? "" : ": ",
              problem.c_str());
  g_failures += !problem.empty();
}

bool fp8(cudaDataType_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }
zt::fp8::Format format(cudaDataType_t t) { return t == CUDA_R_8F_E4M3 ? zt::fp8::Format::E4M3 : zt::fp8::Format::E5M2; }
size_t bytes_of(cudaDataType_t t) { return fp8(t) ? 1 : t == CUDA_R_32F ? 4 : 2; }

// one element of type t: encode a float (rounding as the types define) / decode
void put(std::vector<uint8_t>& m, cudaDataType_t t, int64_t i, float v) {
  uint8_t* p = m.data() + i * int64_t(bytes_of(t));
  if (fp8(t)) *p = zt::fp8::from_float(v, format(t));
  else if (t == CUDA_R_32F) std::memcpy(p, &v, 4);
  else {
    const uint16_t h = t == CUDA_R_16BF ? zt::emu::float_to_bf16_bits(v) : zt::emu::float_to_half_bits(v);
    std::memcpy(p, &h, 2);
  }
}
float get(const std::vector<uint8_t>& m, cudaDataType_t t, int64_t i) {
  const uint8_t* p = m.data() + i * int64_t(bytes_of(t));
  if (fp8(t)) return zt::fp8::to_float(*p, format(t));
  if (t == CUDA_R_32F) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return t == CUDA_R_16BF ? zt::emu::bf16_bits_to_float(h) : zt::emu::half_bits_to_float(h);
}

// A value exact in both FP8 formats: (1, 1.25, 1.5 or 1.75) 2^e, e in [-2, 3], either sign
float operand(std::mt19937& rng) {
  const float m = 1.0f + 0.25f * float(rng() % 4);
  const int e = int(rng() % 6) - 2;
  return (rng() % 2 ? -1.0f : 1.0f) * std::ldexp(m, e);
}

struct Case {
  std::string name;
  cudaDataType_t a = CUDA_R_8F_E4M3, b = CUDA_R_8F_E4M3, c = CUDA_R_16BF, d = CUDA_R_16BF;
  int64_t m = 32, n = 24, k = 64;
  int64_t lda_pad = 0, ldb_pad = 0;  // extra rows in the leading dimensions (multiples of 16)
  float alpha = 1, beta = 0;
  float sa = 1, sb = 1, sc = 1, sd = 1;
  bool scales = true, amax = false, bias = false;
  float planted_sb = 0;  // nonzero: the GEMM is given this B scale, the reference sb (must differ)
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  bool in_place = false;
  float a_value_scale = 1;  // multiplies A's values (large values to saturate an FP8 D)
};

struct Outcome {
  cublasStatus_t heuristic = CUBLAS_STATUS_SUCCESS, matmul = CUBLAS_STATUS_SUCCESS;
  std::string mismatch;  // empty when the result equals the reference bit for bit
};

template <typename T>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v) {
  cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v);
}

void* device_copy(const std::vector<uint8_t>& h) {
  void* p = nullptr;
  cudaMalloc(&p, h.size() + 256);
  cudaMemcpy(p, h.data(), h.size(), cudaMemcpyHostToDevice);
  return p;
}

Outcome run(const Case& x) {
  std::mt19937 rng(1234);
  const bool ta = x.ta == CUBLAS_OP_T, tb = x.tb == CUBLAS_OP_T;
  // stored shapes: A is (k, m) for op T, else (m, k); B (k, n) for op N, else (n, k)
  const int64_t a_rows = ta ? x.k : x.m, a_cols = ta ? x.m : x.k, b_rows = tb ? x.n : x.k, b_cols = tb ? x.k : x.n;
  const int64_t lda = a_rows + x.lda_pad, ldb = b_rows + x.ldb_pad, ldd = x.m;
  std::vector<uint8_t> A(size_t(lda * a_cols) * bytes_of(x.a)), B(size_t(ldb * b_cols) * bytes_of(x.b));
  std::vector<uint8_t> C(size_t(ldd * x.n) * bytes_of(x.c)), D(size_t(ldd * x.n) * bytes_of(x.d), 0);
  std::vector<uint8_t> bias(size_t(x.m) * 2);
  for (int64_t i = 0; i < a_rows * a_cols; ++i) put(A, x.a, (i % a_rows) + (i / a_rows) * lda, operand(rng) * x.a_value_scale);
  for (int64_t i = 0; i < b_rows * b_cols; ++i) put(B, x.b, (i % b_rows) + (i / b_rows) * ldb, operand(rng));
  for (int64_t i = 0; i < ldd * x.n; ++i) put(C, x.c, i, float(int(rng() % 9) - 4));
  const cudaDataType_t bias_type = x.d == CUDA_R_32F ? CUDA_R_16BF : x.c;
  for (int64_t i = 0; i < x.m; ++i) {
    const float v = float(int(rng() % 5) - 2);
    if (bias_type == CUDA_R_16BF) {
      const uint16_t h = zt::emu::float_to_bf16_bits(v);
      std::memcpy(&bias[size_t(i) * 2], &h, 2);
    } else {
      const uint16_t h = zt::emu::float_to_half_bits(v);
      std::memcpy(&bias[size_t(i) * 2], &h, 2);
    }
  }
  // the reference: op(A) op(B) in k order, then the documented scaling
  std::vector<float> want(size_t(x.m * x.n));
  float want_amax = 0;
  for (int64_t c = 0; c < x.n; ++c)
    for (int64_t i = 0; i < x.m; ++i) {
      float acc = 0;
      for (int64_t q = 0; q < x.k; ++q) {
        const float av = get(A, x.a, ta ? q + i * lda : i + q * lda), bv = get(B, x.b, tb ? c + q * ldb : q + c * ldb);
        acc += av * bv;
      }
      float v = x.alpha * x.sa * x.sb * acc;
      if (x.beta != 0) v += x.beta * x.sc * get(C, x.c, i + c * ldd);
      if (x.bias) {
        uint16_t h;
        std::memcpy(&h, &bias[size_t(i) * 2], 2);
        v += bias_type == CUDA_R_16BF ? zt::emu::bf16_bits_to_float(h) : zt::emu::half_bits_to_float(h);
      }
      want_amax = std::max(want_amax, std::fabs(v));
      want[size_t(i + c * x.m)] = fp8(x.d) ? v * x.sd : v;
    }
  std::vector<uint8_t> Dwant(D.size());
  for (int64_t i = 0; i < x.m * x.n; ++i) put(Dwant, x.d, i, want[size_t(i)]);

  void *dA = device_copy(A), *dB = device_copy(B), *dC = device_copy(C), *dD = device_copy(D), *dbias = device_copy(bias);
  const float scales[5] = {x.sa, x.planted_sb != 0 ? x.planted_sb : x.sb, x.sc, x.sd, 0.0f};
  float* dscales = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&dscales), sizeof scales);
  cudaMemcpy(dscales, scales, sizeof scales, cudaMemcpyHostToDevice);

  cublasLtHandle_t lt;
  cublasLtCreate(&lt);
  cublasLtMatmulDesc_t op;
  cublasLtMatmulDescCreate(&op, x.compute, CUDA_R_32F);
  set(op, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(x.ta));
  set(op, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(x.tb));
  if (x.scales) {
    set(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(dscales));
    set(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(dscales + 1));
    set(op, CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, static_cast<const void*>(dscales + 2));
    if (fp8(x.d) || !fp8(x.a)) set(op, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, static_cast<const void*>(dscales + 3));
  }
  if (x.amax) set(op, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, static_cast<void*>(dscales + 4));
  if (x.bias) {
    set(op, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BIAS));
    set(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(dbias));
  }
  cublasLtMatrixLayout_t la, lb, lc, ld;
  cublasLtMatrixLayoutCreate(&la, x.a, uint64_t(a_rows), uint64_t(a_cols), lda);
  cublasLtMatrixLayoutCreate(&lb, x.b, uint64_t(b_rows), uint64_t(b_cols), ldb);
  cublasLtMatrixLayoutCreate(&lc, x.c, uint64_t(x.m), uint64_t(x.n), ldd);
  cublasLtMatrixLayoutCreate(&ld, x.d, uint64_t(x.m), uint64_t(x.n), ldd);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  Outcome out;
  out.heuristic = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, ld, pref, 1, &result, &found);
  const void* c_ptr = x.in_place ? dD : dC;
  out.matmul = cublasLtMatmul(lt, op, &x.alpha, dA, la, dB, lb, &x.beta, c_ptr, lc, dD, ld,
                              out.heuristic == CUBLAS_STATUS_SUCCESS ? &result.algo : nullptr, nullptr, 0, nullptr);
  if (out.matmul == CUBLAS_STATUS_SUCCESS) {
    cudaDeviceSynchronize();
    cudaMemcpy(D.data(), dD, D.size(), cudaMemcpyDeviceToHost);
    float amax = 0;
    cudaMemcpy(&amax, dscales + 4, 4, cudaMemcpyDeviceToHost);
    for (int64_t i = 0; i < x.m * x.n && out.mismatch.empty(); ++i)
      if (std::memcmp(&D[size_t(i) * bytes_of(x.d)], &Dwant[size_t(i) * bytes_of(x.d)], bytes_of(x.d)) != 0)
        out.mismatch = "D[" + std::to_string(i) + "] = " + std::to_string(get(D, x.d, i)) + ", want " +
                       std::to_string(get(Dwant, x.d, i));
    if (out.mismatch.empty() && x.amax && amax != want_amax)
      out.mismatch = "amax " + std::to_string(amax) + ", want " + std::to_string(want_amax);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  for (auto l : {la, lb, lc, ld}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);
  for (void* p : {dA, dB, dC, dD, dbias, static_cast<void*>(dscales)}) cudaFree(p);
  return out;
}

std::string status(cublasStatus_t s) { return cublasLtGetStatusName(s); }

void expect_equal(const Case& x) {
  const Outcome o = run(x);
  if (o.heuristic != CUBLAS_STATUS_SUCCESS || o.matmul != CUBLAS_STATUS_SUCCESS)
    return report(x.name, "heuristic " + status(o.heuristic) + ", matmul " + status(o.matmul));
  report(x.name, o.mismatch);
}

// refused by the heuristic (NOT_SUPPORTED: no algorithm) or, where `at_matmul`, by cublasLtMatmul
// with `want` (the heuristic may accept what the call then refuses)
void expect_refused(const Case& x, cublasStatus_t want, bool at_matmul) {
  const Outcome o = run(x);
  const cublasStatus_t got = at_matmul ? o.matmul : o.heuristic;
  report(x.name + " (refused: " + status(want) + ")",
         got == want && o.matmul != CUBLAS_STATUS_SUCCESS ? "" : "heuristic " + status(o.heuristic) + ", matmul " + status(o.matmul));
}

}  // namespace

int main() {
  cudaSetDevice(0);
  // the three products of a linear layer as FP8 recipes run them (Transformer Engine's formats)
  Case fwd{"forward-like E4M3 x E4M3 -> bf16, scales 0.5 and 4"};
  fwd.sa = 0.5f, fwd.sb = 4.0f;
  expect_equal(fwd);
  Case dgrad{"dgrad-like E4M3 x E5M2 -> fp16, C scaled, beta 1, padded lda/ldb"};
  dgrad.b = CUDA_R_8F_E5M2, dgrad.c = dgrad.d = CUDA_R_16F, dgrad.beta = 1, dgrad.sc = 0.25f, dgrad.sa = 2.0f;
  dgrad.lda_pad = 16, dgrad.ldb_pad = 32, dgrad.m = 48, dgrad.n = 16, dgrad.k = 32;
  expect_equal(dgrad);
  Case wgrad{"wgrad-like E5M2 x E4M3 -> fp32 (C fp32), bias bf16"};
  wgrad.a = CUDA_R_8F_E5M2, wgrad.c = wgrad.d = CUDA_R_32F, wgrad.bias = true, wgrad.sb = 0.125f;
  expect_equal(wgrad);
  Case q{"E4M3 x E4M3 -> E4M3 with D scale 0.25 and amax, bias"};
  q.d = CUDA_R_8F_E4M3, q.sd = 0.25f, q.amax = true, q.bias = true;
  expect_equal(q);
  Case sat{"E4M3 x E5M2 -> E5M2 D saturating (D scale 2^10) and amax"};
  sat.b = CUDA_R_8F_E5M2, sat.d = CUDA_R_8F_E5M2, sat.sd = 1024.0f, sat.amax = true;
  expect_equal(sat);
  Case sat4{"E4M3 x E4M3 -> E4M3 D saturating at 448 (D scale 16)"};
  sat4.d = CUDA_R_8F_E4M3, sat4.sd = 16.0f, sat4.amax = true;
  expect_equal(sat4);
  Case tiny{"E4M3 D of subnormal magnitudes (D scale 2^-12)"};
  tiny.d = CUDA_R_8F_E4M3, tiny.sd = 1.0f / 4096;
  expect_equal(tiny);
  Case unscaled{"no scale pointers (each taken as 1)"};
  unscaled.scales = false;
  expect_equal(unscaled);

  // a planted wrong scale: the GEMM given B's scale 8, the reference 4
  Case planted = fwd;
  planted.name = "planted: B scale 8 where the recipe says 4";
  planted.planted_sb = 8.0f;
  const Outcome p = run(planted);
  report(planted.name + " is caught", p.matmul == CUBLAS_STATUS_SUCCESS && !p.mismatch.empty()
                                           ? ""
                                           : "the comparison did not see the wrong scale");

  // refusals (3.4.17's FP8 table and requirements)
  Case e5e5{"E5M2 x E5M2"};
  e5e5.a = e5e5.b = CUDA_R_8F_E5M2;
  expect_refused(e5e5, CUBLAS_STATUS_NOT_SUPPORTED, false);
  Case nn{"A not transposed (not TN)"};
  nn.ta = CUBLAS_OP_N;
  expect_refused(nn, CUBLAS_STATUS_NOT_SUPPORTED, false);
  Case tt{"B transposed (not TN)"};
  tt.tb = CUBLAS_OP_T;
  expect_refused(tt, CUBLAS_STATUS_NOT_SUPPORTED, false);
  Case k24{"k = 24 (not a multiple of 16)"};
  k24.k = 24;
  expect_refused(k24, CUBLAS_STATUS_NOT_SUPPORTED, false);
  Case m24{"m = 24 (not a multiple of 16)"};
  m24.m = 24;
  expect_refused(m24, CUBLAS_STATUS_NOT_SUPPORTED, false);
  Case lda8{"lda = k + 8 (not a multiple of 16)"};
  lda8.lda_pad = 8;
  expect_refused(lda8, CUBLAS_STATUS_NOT_SUPPORTED, false);
  Case e4e4e5{"E4M3 x E4M3 -> E5M2 D"};
  e4e4e5.d = CUDA_R_8F_E5M2;
  expect_refused(e4e4e5, CUBLAS_STATUS_NOT_SUPPORTED, false);
  Case cfp8{"C in FP8"};
  cfp8.c = CUDA_R_8F_E4M3, cfp8.d = CUDA_R_8F_E4M3;
  expect_refused(cfp8, CUBLAS_STATUS_NOT_SUPPORTED, false);
  Case c32d16{"C fp32 with a bf16 D"};
  c32d16.c = CUDA_R_32F;
  expect_refused(c32d16, CUBLAS_STATUS_NOT_SUPPORTED, false);
  Case pedantic{"CUBLAS_COMPUTE_32F_PEDANTIC"};
  pedantic.compute = CUBLAS_COMPUTE_32F_PEDANTIC;
  expect_refused(pedantic, CUBLAS_STATUS_NOT_SUPPORTED, false);
  Case mixed{"FP8 A with a bf16 B"};
  mixed.b = CUDA_R_16BF;
  expect_refused(mixed, CUBLAS_STATUS_NOT_SUPPORTED, false);
  Case dscale16{"D scale with a bf16 D"};
  dscale16.a = dscale16.b = CUDA_R_16BF, dscale16.ta = CUBLAS_OP_T;
  expect_refused(dscale16, CUBLAS_STATUS_INVALID_VALUE, true);
  Case amax16{"amax with a bf16 D (FP8 A and B)"};
  amax16.amax = true;
  expect_refused(amax16, CUBLAS_STATUS_INVALID_VALUE, true);
  Case inplace{"C == D with an FP8 D"};
  inplace.d = CUDA_R_8F_E4M3, inplace.in_place = true, inplace.beta = 1;
  expect_refused(inplace, CUBLAS_STATUS_INVALID_VALUE, true);
  std::printf("%d failed\n", g_failures);
  return g_failures ? 1 : 0;
}
