// AdamW with decoupled weight decay, written in the same order of operations as
// torch.optim.AdamW (single-tensor path) so parity tests compare like with like. One pass over
// the states, all cores (OpenMP, static partition); the compute-precision copy of the updated
// parameters is written in the same pass, so the host's AdamW (optimizer offload) moves 30 bytes
// per parameter with a bf16 copy: read p, g, m, v (16), write p, m, v (12) and the copy (2).
//
// The fp32 path has explicit AVX-512 and AVX2 (+F16C) bodies (16 or 8 parameters per
// instruction, chosen at run time) and the scalar loop as the reference for the tail and for
// machines without them. All do the same IEEE operations in the same order without fused
// multiply-adds (this file is compiled with -ffp-contract=off), so they agree bit for bit, with
// every compute copy (tests/unit/backend/test_cpu_ops.cpp).
#include <atomic>
#include <cmath>

#include "engine/backend/cpu/ops.h"
#include "engine/core/dtype.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace zt::cpu {

namespace {
enum class Copy { None, F32, BF16, F16 };

template <typename F>
struct CoefT {
  F beta1, beta2, one_m_b1, one_m_b2, step_size, bc2_sqrt, eps, decay;
  CoefT(float lr, float b1, float b2, float e, float wd, int t) {
    const F bc1 = F(1) - std::pow(F(b1), F(t));
    const F bc2 = F(1) - std::pow(F(b2), F(t));
    beta1 = F(b1), beta2 = F(b2), one_m_b1 = F(1) - F(b1), one_m_b2 = F(1) - F(b2);
    step_size = F(lr) / bc1;
    bc2_sqrt = std::sqrt(bc2);
    eps = F(e);
    decay = F(1) - F(lr) * F(wd);
  }
};

// The reference: one element.
template <typename F, Copy C>
inline void adamw_one(int64_t i, F* params, const F* grads, F* m, F* v, void* compute, const CoefT<F>& k) {
  const F g = grads[i];
  F p = params[i] * k.decay;
  const F mi = m[i] * k.beta1 + g * k.one_m_b1;  // torch: lerp(m, g, 1 - beta1)
  const F vi = v[i] * k.beta2 + g * g * k.one_m_b2;
  const F denom = std::sqrt(vi) / k.bc2_sqrt + k.eps;
  p -= k.step_size * mi / denom;
  params[i] = p;
  m[i] = mi;
  v[i] = vi;
  if constexpr (C == Copy::F32) static_cast<float*>(compute)[i] = float(p);
  if constexpr (C == Copy::BF16) static_cast<uint16_t*>(compute)[i] = float_to_bf16(float(p));
  if constexpr (C == Copy::F16) static_cast<uint16_t*>(compute)[i] = float_to_fp16(float(p));
}

template <typename F, Copy C>
void adamw_scalar(F* params, const F* grads, F* m, F* v, void* compute, int64_t lo, int64_t hi, const CoefT<F>& k) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = lo; i < hi; ++i) adamw_one<F, C>(i, params, grads, m, v, compute, k);
}

#if defined(__x86_64__)
// 8 parameters at a time; the same operations as adamw_one. bf16: round to nearest even with the
// integer trick of float_to_bf16, NaN kept quiet. fp16: F16C's conversion (IEEE round to nearest
// even, subnormals and overflow to inf as float_to_fp16), with NaN lanes set to the reference's
// canonical quiet NaN (the hardware keeps the payload).
template <Copy C>
__attribute__((target("avx2,f16c"))) void adamw_avx2(float* params, const float* grads, float* m, float* v,
                                                      void* compute, int64_t n8, const CoefT<float>& k) {
  const __m256 beta1 = _mm256_set1_ps(k.beta1), beta2 = _mm256_set1_ps(k.beta2), omb1 = _mm256_set1_ps(k.one_m_b1),
               omb2 = _mm256_set1_ps(k.one_m_b2), step = _mm256_set1_ps(k.step_size),
               bc2s = _mm256_set1_ps(k.bc2_sqrt), eps = _mm256_set1_ps(k.eps), decay = _mm256_set1_ps(k.decay);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n8; i += 8) {
    const __m256 g = _mm256_loadu_ps(grads + i);
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(params + i), decay);
    const __m256 mi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), beta1), _mm256_mul_ps(g, omb1));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), beta2), _mm256_mul_ps(_mm256_mul_ps(g, g), omb2));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2s), eps);
    p = _mm256_sub_ps(p, _mm256_div_ps(_mm256_mul_ps(step, mi), denom));
    _mm256_storeu_ps(params + i, p);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    if constexpr (C == Copy::F32) _mm256_storeu_ps(static_cast<float*>(compute) + i, p);
    if constexpr (C == Copy::BF16 || C == Copy::F16) {
      const __m256i u = _mm256_castps_si256(p);
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                             _mm256_set1_epi32(0x7f800000));
      __m256i h;  // 8 x 32-bit, low halves hold the 16-bit results
      if constexpr (C == Copy::BF16) {
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        const __m256i rounded =
            _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
        const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
        h = _mm256_blendv_epi8(rounded, quiet, nan);
      } else {
        const __m256i half = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m256i canonical =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x7e00));
        h = _mm256_blendv_epi8(half, canonical, nan);
      }
      const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(compute) + i), packed);
    }
  }
}

// 16 parameters at a time: the AVX2 body's operations on 512-bit vectors.
template <Copy C>
__attribute__((target("avx512f"))) void adamw_avx512(float* params, const float* grads, float* m, float* v,
                                                      void* compute, int64_t n16, const CoefT<float>& k) {
  const __m512 beta1 = _mm512_set1_ps(k.beta1), beta2 = _mm512_set1_ps(k.beta2), omb1 = _mm512_set1_ps(k.one_m_b1),
               omb2 = _mm512_set1_ps(k.one_m_b2), step = _mm512_set1_ps(k.step_size),
               bc2s = _mm512_set1_ps(k.bc2_sqrt), eps = _mm512_set1_ps(k.eps), decay = _mm512_set1_ps(k.decay);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n16; i += 16) {
    const __m512 g = _mm512_loadu_ps(grads + i);
    __m512 p = _mm512_mul_ps(_mm512_loadu_ps(params + i), decay);
    const __m512 mi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(m + i), beta1), _mm512_mul_ps(g, omb1));
    const __m512 vi = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(v + i), beta2), _mm512_mul_ps(_mm512_mul_ps(g, g), omb2));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2s), eps);
    p = _mm512_sub_ps(p, _mm512_div_ps(_mm512_mul_ps(step, mi), denom));
    _mm512_storeu_ps(params + i, p);
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    if constexpr (C == Copy::F32) _mm512_storeu_ps(static_cast<float*>(compute) + i, p);
    if constexpr (C == Copy::BF16 || C == Copy::F16) {
      const __m512i u = _mm512_castps_si512(p);
      const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                   _mm512_set1_epi32(0x7f800000));
      __m512i h;  // 16 x 32-bit, low halves hold the 16-bit results
      if constexpr (C == Copy::BF16) {
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        const __m512i rounded =
            _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
        const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
        h = _mm512_mask_blend_epi32(nan, rounded, quiet);
      } else {
        const __m512i half = _mm512_cvtepu16_epi32(_mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m512i canonical = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)),
                                                  _mm512_set1_epi32(0x7e00));
        h = _mm512_mask_blend_epi32(nan, half, canonical);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(compute) + i), _mm512_cvtepi32_epi16(h));
    }
  }
}
#endif

std::atomic<AdamwBody> forced_body{AdamwBody::Best};

template <Copy C>
void adamw_f32(float* params, const float* grads, float* m, float* v, void* compute, int64_t n, const CoefT<float>& k) {
  int64_t done = 0;
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  const AdamwBody body = forced_body.load(std::memory_order_relaxed);
  if (avx512 && body == AdamwBody::Best) {
    done = n / 16 * 16;
    adamw_avx512<C>(params, grads, m, v, compute, done, k);
  } else if (avx2 && body != AdamwBody::Scalar) {
    done = n / 8 * 8;
    adamw_avx2<C>(params, grads, m, v, compute, done, k);
  }
#endif
  adamw_scalar<float, C>(params, grads, m, v, compute, done, n, k);  // the tail, or everything
}
}  // namespace

void force_adamw_body(AdamwBody body) { forced_body.store(body); }

const char* adamw_body_name() {
#if defined(__x86_64__)
  const AdamwBody body = forced_body.load();
  if (body == AdamwBody::Best && __builtin_cpu_supports("avx512f")) return "avx512";
  if (body != AdamwBody::Scalar && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) return "avx2";
#endif
  return "scalar";
}

template <typename F>
void adamw_update(F* params, const F* grads, F* m, F* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t) {
  adamw_scalar<F, Copy::None>(params, grads, m, v, nullptr, 0, n, CoefT<F>(lr, beta1, beta2, eps, weight_decay, t));
}

void adamw_update_with_copy(float* params, const float* grads, float* m, float* v, void* compute, DType ct, int64_t n,
                            float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
  const CoefT<float> k(lr, beta1, beta2, eps, weight_decay, t);
  if (!compute) adamw_f32<Copy::None>(params, grads, m, v, nullptr, n, k);
  else if (ct == DType::F32) adamw_f32<Copy::F32>(params, grads, m, v, compute, n, k);
  else if (ct == DType::BF16) adamw_f32<Copy::BF16>(params, grads, m, v, compute, n, k);
  else adamw_f32<Copy::F16>(params, grads, m, v, compute, n, k);
}

void adamw_update_reference(float* params, const float* grads, float* m, float* v, void* compute, DType ct, int64_t n,
                            float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
  const CoefT<float> k(lr, beta1, beta2, eps, weight_decay, t);
  if (!compute) adamw_scalar<float, Copy::None>(params, grads, m, v, nullptr, 0, n, k);
  else if (ct == DType::F32) adamw_scalar<float, Copy::F32>(params, grads, m, v, compute, 0, n, k);
  else if (ct == DType::BF16) adamw_scalar<float, Copy::BF16>(params, grads, m, v, compute, 0, n, k);
  else adamw_scalar<float, Copy::F16>(params, grads, m, v, compute, 0, n, k);
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t, float, float, float, float, float, int);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t, float, float, float, float, float, int);

}  // namespace zt::cpu
