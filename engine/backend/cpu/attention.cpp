// Causal multi-head self-attention on packed QKV, with grouped-query attention (NKV key/value
// heads, each shared by NH / NKV consecutive query heads; NKV = NH is plain multi-head). Forward
// stores only the log-sum-exp of each score row (B,NH,T); backward recomputes the probabilities
// from it, flash-attention style, so no (T,T) matrix per head is kept between the passes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/backend/cpu/ops.h"
#include "engine/backend/cpu/vec_math.h"

namespace zt::cpu {

namespace {
template <typename F>
inline F dot(const F* a, const F* b, int n) {
  F acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}
template <typename F>
inline void axpy(F* y, F a, const F* x, int n) {
#pragma omp simd
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}
}  // namespace

template <typename F>
void attention_forward(F* out, F* lse, const F* qkv, int B, int T, int C, int NH, int NKV, const int32_t* pos) {
  const int hs = C / NH, C3 = (NH + 2 * NKV) * hs, group = NH / NKV;
  const F scale = F(1) / std::sqrt(F(hs));
#pragma omp parallel
  {
    std::vector<F> score(T);  // (T) one row of scores, per thread
#pragma omp for collapse(3) schedule(static)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int t = 0; t < T; ++t) {
          const F* base = qkv + int64_t(b) * T * C3;
          const F* q = base + int64_t(t) * C3 + h * hs;
          const int kh = C + (h / group) * hs, vh = kh + NKV * hs;  // this head's k and v columns
          const int first = pos ? t - pos[int64_t(b) * T + t] : 0;  // the first key of t's document
          F mx = -std::numeric_limits<F>::infinity();
          for (int t2 = first; t2 <= t; ++t2) {
            score[t2] = dot(q, base + int64_t(t2) * C3 + kh, hs) * scale;
            mx = std::max(mx, score[t2]);
          }
          F sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int t2 = first; t2 <= t; ++t2) {
            score[t2] = vexp(score[t2] - mx);
            sum += score[t2];
          }
          F* o = out + (int64_t(b) * T + t) * C + h * hs;
          std::fill(o, o + hs, F(0));
          const F inv = F(1) / sum;
          for (int t2 = first; t2 <= t; ++t2)
            axpy(o, score[t2] * inv, base + int64_t(t2) * C3 + vh, hs);
          lse[(int64_t(b) * NH + h) * T + t] = mx + std::log(sum);
        }
  }
}

template <typename F>
void attention_backward(F* dqkv, const F* dout, const F* qkv, const F* lse, int B, int T, int C,
                        int NH, int NKV, const int32_t* pos) {
  const int hs = C / NH, C3 = (NH + 2 * NKV) * hs, group = NH / NKV;
  const F scale = F(1) / std::sqrt(F(hs));
  // One (b, key/value head) per task: its dk and dv collect contributions from every query row of
  // every query head of its group, so a task owns all of them and the summation order is fixed.
#pragma omp parallel
  {
    std::vector<F> p(T), dp(T);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b)
      for (int g = 0; g < NKV; ++g)
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const F* base = qkv + int64_t(b) * T * C3;
        F* dbase = dqkv + int64_t(b) * T * C3;
        const int kh = C + g * hs, vh = kh + NKV * hs;
        for (int t = 0; t < T; ++t) {
          const F* q = base + int64_t(t) * C3 + h * hs;
          const F* d = dout + (int64_t(b) * T + t) * C + h * hs;
          const F l = lse[(int64_t(b) * NH + h) * T + t];
          const int first = pos ? t - pos[int64_t(b) * T + t] : 0;
          for (int t2 = first; t2 <= t; ++t2) {
            p[t2] = dot(q, base + int64_t(t2) * C3 + kh, hs) * scale - l;
            dp[t2] = dot(d, base + int64_t(t2) * C3 + vh, hs);
          }
          F D = 0;  // sum_t2 p * dp  (= dout . out)
#pragma omp simd reduction(+ : D)
          for (int t2 = first; t2 <= t; ++t2) {
            p[t2] = vexp(p[t2]);
            D += p[t2] * dp[t2];
          }
          F* dq = dbase + int64_t(t) * C3 + h * hs;
          for (int t2 = first; t2 <= t; ++t2) {
            const F ds = p[t2] * (dp[t2] - D) * scale;  // d(score before scaling)
            const F* k = base + int64_t(t2) * C3 + kh;
            F* dk = dbase + int64_t(t2) * C3 + kh;
            F* dv = dbase + int64_t(t2) * C3 + vh;
            axpy(dq, ds, k, hs);
            axpy(dk, ds, q, hs);
            axpy(dv, p[t2], d, hs);
          }
        }
      }
  }
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int, int, const int32_t*);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int, int, const int32_t*);
template void attention_backward<float>(float*, const float*, const float*, const float*, int, int, int, int, int,
                                        const int32_t*);
template void attention_backward<double>(double*, const double*, const double*, const double*, int, int, int, int, int,
                                         const int32_t*);

}  // namespace zt::cpu
