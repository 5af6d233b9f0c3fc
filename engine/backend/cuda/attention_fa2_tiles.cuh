// What the FlashAttention-2 kernels (attention_fa2.cu) share between forward and backward: where a head lives in qkv, the cp.async tile loads, the A fragments of Q rows from global
// memory, and the conversion of mma accumulators into A fragments.
//
// mma.sync.m16n8k16 fragments (PTX ISA, 16-bit A/B, fp32 C), g = lane / 4, q = lane % 4:
//   A (16 x 16, row-major): a0 = (g, 2q..2q+1), a1 = (g + 8, 2q..), a2 = (g, 2q + 8..), a3 = (g + 8, 2q + 8..)
//   B (16 x 8, k x n):      b0 = (k = 2q..2q+1, n = g), b1 = (k = 2q + 8.., n = g)
//   C (16 x 8):             c0, c1 = (g, 2q..2q+1), c2, c3 = (g + 8, 2q..2q+1)
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "engine/backend/cuda/attention_fa2_layout.h"
#include "engine/backend/cuda/attention_fa2_layout.h"
#include "engine/backend/cuda/ptx.cuh"

namespace zt::cuda::fa2 {

template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

template <typename T>
__device__ __forceinline__ uint32_t pack2(T lo, T hi) {
  const uint16_t a = *reinterpret_cast<const uint16_t*>(&lo), b = *reinterpret_cast<const uint16_t*>(&hi);
  return uint32_t(a) | (uint32_t(b) << 16);
}

// The A fragment of k-step kk from the fp32 accumulators of n-blocks 2 kk and 2 kk + 1 (rounded
// to T): m16n8k16's C layout, two n-blocks side by side, is its A layout.
template <typename T, int N>
__device__ __forceinline__ void a_from_c(uint32_t (&a)[4], const float (&c)[N][4], int kk) {
  a[0] = pack2<T>(c[2 * kk][0], c[2 * kk][1]);
  a[1] = pack2<T>(c[2 * kk][2], c[2 * kk][3]);
  a[2] = pack2<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = pack2<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

// Where query head h of sequence b lives in qkv (B,T,(NH + 2 NKV) hs), out (B,T,C), lse (B,NH,T)
struct Heads {
  int64_t row, q, k, v, o, stat;  // row: elements per (b, t) row of qkv; the rest: offsets of t = 0
  __device__ Heads(int T_, int C, int NH, int NKV, int hs, int bh) : Heads(T_, C, NH, NKV, hs, bh / NH, bh % NH) {}
  // query head h of sequence b, with its key/value head
  __device__ Heads(int T_, int C, int NH, int NKV, int hs, int b, int h) {
    const int kvh = h / (NH / NKV);
    row = int64_t(NH + 2 * NKV) * hs;
    q = int64_t(b) * T_ * row + int64_t(h) * hs;
    k = int64_t(b) * T_ * row + C + int64_t(kvh) * hs;
    v = k + int64_t(NKV) * hs;
    o = int64_t(b) * T_ * C + int64_t(h) * hs;
    stat = (int64_t(b) * NH + h) * T_;
  }
};

// rows [t0, t0 + ROWS) of a (.., T, ld) tensor at `base` + t * ld into a shared (ROWS, HS + 8) tile, zeros past T
template <typename T, int HS, int ROWS = kKeys>
__device__ void load_rows(T* dst, const T* base, int64_t ld, int t0, int T_) {
  constexpr int kLd = HS + 8, kChunks = HS / 8;
  for (int idx = threadIdx.x; idx < ROWS * kChunks; idx += blockDim.x) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8, t = t0 + r;
    cp_async16(dst + r * kLd + c, base + int64_t(t < T_ ? t : 0) * ld + c, t < T_);
  }
}

// A fragments of 16 rows (r0 = first + g, r1 = r0 + 8) of a (T, ld) tensor, zeros past T
template <typename T, int HS>
__device__ void load_a_rows(uint32_t (&a)[HS / 16][4], const T* base, int64_t ld, int r0, int T_, int qd) {
  for (int kk = 0; kk < HS / 16; ++kk)
    for (int i = 0; i < 4; ++i) {
      const int r = r0 + (i % 2) * 8, c = kk * 16 + 2 * qd + (i / 2) * 8;
      a[kk][i] = r < T_ ? *reinterpret_cast<const uint32_t*>(base + int64_t(r) * ld + c) : 0u;
    }
}

}  // namespace zt::cuda::fa2
