// The first generation of the FlashAttention-2 kernels, kept for comparison (ZTRAIN_ATTENTION=fa2-v1;
// tools/gpu_check.sh times it against attention_fa2.cu, and tools/kernel_report.py reports both).
// Causal attention in FlashAttention-2's structure, on mma.sync tensor-core instructions
// with everything a warp computes held in registers (bf16 / fp16, head size 64 or 128):
// - a block of 4 warps takes 64 queries, 16 per warp; each warp keeps its Q rows as mma A
//   fragments in registers for the whole kernel;
// - 64-key tiles of K and V stream through shared memory with 16-byte cp.async loads, double
//   buffered: the next tile loads while this one computes;
// - S = Q K^T (16 x 64 per warp) lands in mma accumulators; the online softmax runs on them in
//   registers (a row's 64 scores are spread over the 4 lanes of a quad: shuffles reduce them);
// - P is converted in registers straight into A fragments of O += P V (the accumulator layout of
//   m16n8k16 matches the A layout two n-blocks at a time), so S and P never touch shared memory;
// - O (16 x hs) stays in fp32 accumulators; each row's log-sum-exp is written for the backward.
// P is rounded to T before P V, as in FlashAttention. The backward (below) follows the same plan.
// Not yet run on a GPU: the index arithmetic is checked by a numpy emulation of the fragment layouts
// (attention_fa2_tiles.cuh; tools/fa2_emulation, in CI: forward and backward, head sizes 64 and
// 128, T = 150, grouped-query heads), and the kernels run on the emulated device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/launch.cuh"
#include "engine/backend/cuda/ops.cuh"
#include "engine/backend/cuda/ptx.cuh"
#include "engine/backend/cuda/attention_fa2_layout.h"
#include "engine/backend/cuda/attention_fa2_tiles.cuh"

namespace zt::cuda {

namespace {
using fa2::kKeys;
using fa2::kRows;
using fa2::kWarps;
using fa2::a_from_c;
using fa2::Heads;
using fa2::load_a_rows;
using fa2::load_rows;
using fa2::pack2;

// B fragment pair for k = rows 2qd.. (and + 8) of a shared (rows, kLd) tile at column n: the
// "transposed" read (two 16-bit loads a register)
template <typename T, int kLd>
__device__ __forceinline__ void b_down(uint32_t& b0, uint32_t& b1, const T* tile, int k0, int n, int qd) {
  const T* p = tile + (k0 + 2 * qd) * kLd + n;
  b0 = pack2<T>(p[0], p[kLd]);
  b1 = pack2<T>(p[8 * kLd], p[9 * kLd]);
}

// rows [t0, t0 + 64) of K and V (zeros past T) into shared tiles of (64, HS + 8)
template <typename T, int HS>
__device__ void load_kv(T* Ks, T* Vs, const T* qkv, const Heads& H, int t0, int T_) {
  load_rows<T, HS>(Ks, qkv + H.k, H.row, t0, T_);
  load_rows<T, HS>(Vs, qkv + H.v, H.row, t0, T_);
}

// B fragment pair for n = row `n` of a shared tile, k = columns k0 + 2qd.. (and + 8): contiguous
template <typename T, int kLd>
__device__ __forceinline__ void b_across(uint32_t& b0, uint32_t& b1, const T* tile, int n, int k0, int qd) {
  const T* p = tile + n * kLd + k0 + 2 * qd;
  b0 = *reinterpret_cast<const uint32_t*>(p);
  b1 = *reinterpret_cast<const uint32_t*>(p + 8);
}

// c (16 x 8 NB, fp32) = a (16 x HS, A fragments) times the transpose of a shared (8 NB, HS) tile
template <typename T, int HS, int kLd, int NB>
__device__ __forceinline__ void times_tile_t(float (&c)[NB][4], const uint32_t (&a)[HS / 16][4], const T* tile, int g,
                                             int qd) {
  for (int nb = 0; nb < NB; ++nb)
    for (int kk = 0; kk < HS / 16; ++kk) {
      uint32_t b0, b1;
      b_across<T, kLd>(b0, b1, tile, nb * 8 + g, kk * 16, qd);
      mma16816<T>(c[nb], a[kk], b0, b1);
    }
}

// The A fragment of k-step k0 / 16 for 16 rows of a shared (.., kLd) tile: r = the thread's first row (g)
template <typename T, int kLd>
__device__ __forceinline__ void a_from_tile(uint32_t (&a)[4], const T* tile, int r, int k0, int qd) {
  const T* p = tile + r * kLd + k0 + 2 * qd;
  a[0] = *reinterpret_cast<const uint32_t*>(p);
  a[1] = *reinterpret_cast<const uint32_t*>(p + 8 * kLd);
  a[2] = *reinterpret_cast<const uint32_t*>(p + 8);
  a[3] = *reinterpret_cast<const uint32_t*>(p + 8 * kLd + 8);
}

// times_tile_t with the A rows read from shared memory as needed (r: the thread's first row there)
template <typename T, int HS, int kLd, int NB>
__device__ __forceinline__ void rows_times_tile_t(float (&c)[NB][4], const T* rows, int r, const T* tile, int g,
                                                  int qd) {
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
    uint32_t a[4];
    a_from_tile<T, kLd>(a, rows, r, kk * 16, qd);
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      uint32_t b0, b1;
      b_across<T, kLd>(b0, b1, tile, nb * 8 + g, kk * 16, qd);
      mma16816<T>(c[nb], a, b0, b1);
    }
  }
}

template <typename T, int HS>
__global__ void __launch_bounds__(32 * kWarps)
    attention_forward_fa2_kernel(T* out, float* lse, const T* qkv, int T_, int C, int NH, int NKV, float scale) {
  constexpr int kLd = HS + 8;  // shared rows padded by 16 bytes: the quads' 32-bit reads spread over banks
  extern __shared__ __align__(16) unsigned char smem[];
  T* tiles = reinterpret_cast<T*>(smem);  // [2 buffers][K, V][64][kLd]
  const Heads H(T_, C, NH, NKV, HS, blockIdx.y);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int q0 = blockIdx.x * kRows, row0 = q0 + warp * 16 + g, row1 = row0 + 8;  // this thread's two rows
  const float scale_log2 = scale * 1.4426950408889634f;  // softmax in base 2: exp2f

  // Q rows of this warp as A fragments, for the HS / 16 steps of the dot products
  uint32_t qa[HS / 16][4];
  load_a_rows<T, HS>(qa, qkv + H.q, H.row, row0, T_, q);
  float o[HS / 8][4] = {};                     // O (16 x HS) of this warp, fp32
  float m0 = -INFINITY, m1 = -INFINITY;         // running maxima (base 2) of rows row0, row1
  float l0 = 0, l1 = 0;                         // this thread's part of the running sums

  const int last_q = min(q0 + kRows, T_) - 1, n_tiles = last_q / kKeys + 1;
  load_kv<T, HS>(tiles, tiles + kKeys * kLd, qkv, H, 0, T_);
  cp_async_commit();
  for (int j = 0; j < n_tiles; ++j) {
    T* Ks = tiles + (j % 2) * 2 * kKeys * kLd;
    T* Vs = Ks + kKeys * kLd;
    if (j + 1 < n_tiles) {  // the next tile into the other buffer while this one computes
      T* nK = tiles + ((j + 1) % 2) * 2 * kKeys * kLd;
      load_kv<T, HS>(nK, nK + kKeys * kLd, qkv, H, (j + 1) * kKeys, T_);
    }
    cp_async_commit();
    cp_async_wait<1>();  // all but the newest group: tile j is in
    __syncthreads();
    const int k0 = j * kKeys;

    // S (16 x 64) = Q K^T: 8 n-blocks of 8 keys
    float s[kKeys / 8][4] = {};
    times_tile_t<T, HS, kLd>(s, qa, Ks, g, q);
    // causal mask, scale, row maxima (a row's scores sit in the 4 lanes of its quad)
    float mx0 = -INFINITY, mx1 = -INFINITY;
    for (int nb = 0; nb < kKeys / 8; ++nb)
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + nb * 8 + 2 * q + (i % 2), r = i < 2 ? row0 : row1;
        s[nb][i] = key <= r ? s[nb][i] * scale_log2 : -INFINITY;
        if (i < 2) mx0 = fmaxf(mx0, s[nb][i]);
        else mx1 = fmaxf(mx1, s[nb][i]);
      }
    for (int off = 1; off <= 2; off *= 2) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
    // tile 0 holds key k0 = 0 <= every row: the maxima are finite from the first tile on
    const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
    const float c0 = exp2f(m0 - n0), c1 = exp2f(m1 - n1);  // 0 on the first tile (m = -inf)
    m0 = n0, m1 = n1;
    float sum0 = 0, sum1 = 0;
    for (int nb = 0; nb < kKeys / 8; ++nb) {
      s[nb][0] = exp2f(s[nb][0] - n0), s[nb][1] = exp2f(s[nb][1] - n0);
      s[nb][2] = exp2f(s[nb][2] - n1), s[nb][3] = exp2f(s[nb][3] - n1);
      sum0 += s[nb][0] + s[nb][1], sum1 += s[nb][2] + s[nb][3];
    }
    l0 = l0 * c0 + sum0, l1 = l1 * c1 + sum1;
    for (int dn = 0; dn < HS / 8; ++dn) o[dn][0] *= c0, o[dn][1] *= c0, o[dn][2] *= c1, o[dn][3] *= c1;

    // O += P V: P's accumulators of n-blocks 2 kk and 2 kk + 1 are the A fragment of key step kk
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t pa[4];
      a_from_c<T>(pa, s, kk);
      for (int dn = 0; dn < HS / 8; ++dn) {  // V (keys x dims): B's k = key, n = dim
        uint32_t b0, b1;
        b_down<T, kLd>(b0, b1, Vs, kk * 16, dn * 8 + g, q);
        mma16816<T>(o[dn], pa, b0, b1);
      }
    }
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
  cp_async_wait<0>();

  for (int off = 1; off <= 2; off *= 2) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, off);
    l1 += __shfl_xor_sync(0xffffffffu, l1, off);
  }
  const float ln2 = 0.6931471805599453f;
  for (int half = 0; half < 2; ++half) {
    const int r = half ? row1 : row0;
    if (r >= T_) continue;
    const float inv = 1.0f / (half ? l1 : l0);
    T* dst = out + H.o + int64_t(r) * C + 2 * q;
    for (int dn = 0; dn < HS / 8; ++dn)
      *reinterpret_cast<uint32_t*>(dst + dn * 8) = pack2<T>(o[dn][2 * half] * inv, o[dn][2 * half + 1] * inv);
    if (q == 0) lse[H.stat + r] = (half ? m1 : m0) * ln2 + logf(half ? l1 : l0);
  }
}

// ---- Backward (FlashAttention-2's recurrences, the same split as the WMMA backward): dK/dV
// parallel over key tiles, each warp holding 16 keys' K and V as A fragments and their dK, dV in
// fp32 accumulators while the query tiles (Q, dO, lse, D of every query head of the key/value
// head's group) stream through shared memory; dQ parallel over query tiles, each warp holding 16
// queries' Q and dO as A fragments and dQ in accumulators while K/V tiles stream. S^T, P^T, dP^T
// and dS^T (or S, P, dP, dS) stay in registers; P and dS are rounded to T before their products,
// as in FlashAttention. At head size 128, dK and dV take 128 fp32 registers a thread, so the dK/dV
// kernel streams query tiles of 32 (S^T and dP^T: 32 registers) and keeps K and V in shared memory,
// reading their fragments as needed.

// query rows per tile streamed by the dK/dV kernel
template <int HS>
constexpr int kDkdvQueryRows = fa2::dkdv_query_rows(HS);

template <typename T, int HS>
__global__ void __launch_bounds__(32 * kWarps)
    attention_backward_dkdv_fa2_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D, int T_,
                                       int C, int NH, int NKV, float scale) {
  constexpr int kLd = HS + 8, kQ = kDkdvQueryRows<HS>, kTile = kQ * kLd, kKvTile = kKeys * kLd;
  constexpr bool kSharedKV = HS > 64;  // K and V rows in shared memory rather than registers
  extern __shared__ __align__(16) unsigned char smem[];
  T* tiles = reinterpret_cast<T*>(smem);                                      // [2][Q, dO][kQ][kLd]
  float* stats = reinterpret_cast<float*>(smem + size_t(4) * kTile * sizeof(T));  // [2][lse2, D][kQ]
  T* kv = reinterpret_cast<T*>(stats + 4 * kQ);                               // kSharedKV: [K, V][64][kLd]
  const int b = blockIdx.y / NKV, kvh = blockIdx.y % NKV, group = NH / NKV;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, qd = lane % 4;
  const int k0 = blockIdx.x * kKeys, kr0 = k0 + warp * 16 + g, kr1 = kr0 + 8;  // this thread's two keys
  const float scale_log2 = scale * 1.4426950408889634f;
  const Heads H0(T_, C, NH, NKV, HS, b, kvh * group);  // the key/value head's offsets
  uint32_t ka[kSharedKV ? 1 : HS / 16][4], va[kSharedKV ? 1 : HS / 16][4];
  if constexpr (kSharedKV) {
    load_rows<T, HS>(kv, qkv + H0.k, H0.row, k0, T_);  // in the first cp.async group, with tile 0
    load_rows<T, HS>(kv + kKvTile, qkv + H0.v, H0.row, k0, T_);
  } else {
    load_a_rows<T, HS>(ka, qkv + H0.k, H0.row, k0 + warp * 16 + g, T_, qd);
    load_a_rows<T, HS>(va, qkv + H0.v, H0.row, k0 + warp * 16 + g, T_, qd);
  }
  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  const int first = k0 / kQ, n_tiles = (T_ + kQ - 1) / kQ - first;  // query tiles at or after the keys
  const int total = group * n_tiles;  // (query head, query tile) pairs, streamed in that order
  auto load = [&](int i, int buf) {
    const Heads H(T_, C, NH, NKV, HS, b, kvh * group + i / n_tiles);
    const int t0 = (first + i % n_tiles) * kQ;
    T* Qs = tiles + buf * 2 * kTile;
    load_rows<T, HS, kQ>(Qs, qkv + H.q, H.row, t0, T_);
    load_rows<T, HS, kQ>(Qs + kTile, dout + H.o, C, t0, T_);
    float* st = stats + buf * 2 * kQ;
    for (int r = threadIdx.x; r < kQ; r += blockDim.x) {
      const int t = t0 + r;
      st[r] = t < T_ ? lse[H.stat + t] * 1.4426950408889634f : INFINITY;  // past T: P = 0
      st[kQ + r] = t < T_ ? D[H.stat + t] : 0.0f;
    }
  };
  load(0, 0);
  cp_async_commit();
  for (int i = 0; i < total; ++i) {
    const int buf = i % 2;
    if (i + 1 < total) load(i + 1, (i + 1) % 2);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T* Qs = tiles + buf * 2 * kTile;
    const T* dOs = Qs + kTile;
    const float* L2 = stats + buf * 2 * kQ;
    const float* Dq = L2 + kQ;
    const int t0 = (first + i % n_tiles) * kQ;
    // S^T (16 keys x kQ queries) = K Q^T and dP^T = V dO^T
    float st[kQ / 8][4] = {}, dpt[kQ / 8][4] = {};
    if constexpr (kSharedKV) {
      rows_times_tile_t<T, HS, kLd>(st, kv, warp * 16 + g, Qs, g, qd);
      rows_times_tile_t<T, HS, kLd>(dpt, kv + kKvTile, warp * 16 + g, dOs, g, qd);
    } else {
      times_tile_t<T, HS, kLd>(st, ka, Qs, g, qd);
      times_tile_t<T, HS, kLd>(dpt, va, dOs, g, qd);
    }
    // P^T = exp(S scale - lse) where key <= query; dS^T = P^T (dP^T - D) scale
    for (int nb = 0; nb < kQ / 8; ++nb)
      for (int i2 = 0; i2 < 4; ++i2) {
        const int col = nb * 8 + 2 * qd + (i2 % 2), key = i2 < 2 ? kr0 : kr1;
        const float p = key <= t0 + col ? exp2f(st[nb][i2] * scale_log2 - L2[col]) : 0.0f;
        st[nb][i2] = p;
        dpt[nb][i2] = p * (dpt[nb][i2] - Dq[col]) * scale;
      }
    // dV += P^T dO and dK += dS^T Q over the kQ queries, 16 at a time
    for (int kk = 0; kk < kQ / 16; ++kk) {
      uint32_t pa[4], da[4];
      a_from_c<T>(pa, st, kk);
      a_from_c<T>(da, dpt, kk);
      for (int dn = 0; dn < HS / 8; ++dn) {
        uint32_t b0, b1;
        b_down<T, kLd>(b0, b1, dOs, kk * 16, dn * 8 + g, qd);
        mma16816<T>(dv[dn], pa, b0, b1);
        b_down<T, kLd>(b0, b1, Qs, kk * 16, dn * 8 + g, qd);
        mma16816<T>(dk[dn], da, b0, b1);
      }
    }
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
  cp_async_wait<0>();
  for (int half = 0; half < 2; ++half) {
    const int r = half ? kr1 : kr0;
    if (r >= T_) continue;
    T* dkr = dqkv + H0.k + int64_t(r) * H0.row + 2 * qd;
    T* dvr = dqkv + H0.v + int64_t(r) * H0.row + 2 * qd;
    for (int dn = 0; dn < HS / 8; ++dn) {
      *reinterpret_cast<uint32_t*>(dkr + dn * 8) = pack2<T>(dk[dn][2 * half], dk[dn][2 * half + 1]);
      *reinterpret_cast<uint32_t*>(dvr + dn * 8) = pack2<T>(dv[dn][2 * half], dv[dn][2 * half + 1]);
    }
  }
}

template <typename T, int HS>
__global__ void __launch_bounds__(32 * kWarps)
    attention_backward_dq_fa2_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D, int T_,
                                     int C, int NH, int NKV, float scale) {
  constexpr int kLd = HS + 8, kTile = kKeys * kLd;
  extern __shared__ __align__(16) unsigned char smem[];
  T* tiles = reinterpret_cast<T*>(smem);  // [2][K, V][64][kLd]
  const Heads H(T_, C, NH, NKV, HS, blockIdx.y);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, qd = lane % 4;
  const int q0 = blockIdx.x * kRows, row0 = q0 + warp * 16 + g, row1 = row0 + 8;
  const float scale_log2 = scale * 1.4426950408889634f;
  uint32_t qa[HS / 16][4], oa[HS / 16][4];
  load_a_rows<T, HS>(qa, qkv + H.q, H.row, row0, T_, qd);
  load_a_rows<T, HS>(oa, dout + H.o, C, row0, T_, qd);
  const float l0 = row0 < T_ ? lse[H.stat + row0] * 1.4426950408889634f : 0.0f;
  const float l1 = row1 < T_ ? lse[H.stat + row1] * 1.4426950408889634f : 0.0f;
  const float d0 = row0 < T_ ? D[H.stat + row0] : 0.0f, d1 = row1 < T_ ? D[H.stat + row1] : 0.0f;
  float dq[HS / 8][4] = {};
  const int last_q = min(q0 + kRows, T_) - 1, n_tiles = last_q / kKeys + 1;
  load_kv<T, HS>(tiles, tiles + kTile, qkv, H, 0, T_);
  cp_async_commit();
  for (int j = 0; j < n_tiles; ++j) {
    const T* Ks = tiles + (j % 2) * 2 * kTile;
    const T* Vs = Ks + kTile;
    if (j + 1 < n_tiles) {
      T* nK = tiles + ((j + 1) % 2) * 2 * kTile;
      load_kv<T, HS>(nK, nK + kTile, qkv, H, (j + 1) * kKeys, T_);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int k0 = j * kKeys;
    // S = Q K^T and dP = dO V^T (16 queries x 64 keys)
    float s[kKeys / 8][4] = {}, dp[kKeys / 8][4] = {};
    times_tile_t<T, HS, kLd>(s, qa, Ks, g, qd);
    times_tile_t<T, HS, kLd>(dp, oa, Vs, g, qd);
    // P = exp(S scale - lse) where key <= query; dS = P (dP - D) scale
    for (int nb = 0; nb < kKeys / 8; ++nb)
      for (int i = 0; i < 4; ++i) {
        const int key = k0 + nb * 8 + 2 * qd + (i % 2), r = i < 2 ? row0 : row1;
        const float p = key <= r && r < T_ ? exp2f(s[nb][i] * scale_log2 - (i < 2 ? l0 : l1)) : 0.0f;
        dp[nb][i] = p * (dp[nb][i] - (i < 2 ? d0 : d1)) * scale;
      }
    // dQ += dS K
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t da[4];
      a_from_c<T>(da, dp, kk);
      for (int dn = 0; dn < HS / 8; ++dn) {
        uint32_t b0, b1;
        b_down<T, kLd>(b0, b1, Ks, kk * 16, dn * 8 + g, qd);
        mma16816<T>(dq[dn], da, b0, b1);
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();
  for (int half = 0; half < 2; ++half) {
    const int r = half ? row1 : row0;
    if (r >= T_) continue;
    T* dst = dqkv + H.q + int64_t(r) * H.row + 2 * qd;
    for (int dn = 0; dn < HS / 8; ++dn)
      *reinterpret_cast<uint32_t*>(dst + dn * 8) = pack2<T>(dq[dn][2 * half], dq[dn][2 * half + 1]);
  }
}

template <typename T, int HS>
void launch_forward(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int NKV, cudaStream_t s) {
  const size_t smem = fa2::forward_smem(HS, sizeof(T));
  auto kernel = attention_forward_fa2_kernel<T, HS>;
  if (smem > 48 * 1024)
    ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(unsigned((T_ + kRows - 1) / kRows), unsigned(B * NH));
  launch(kernel, grid, 32 * kWarps, smem, s, out, lse, qkv, T_, C, NH, NKV, 1.0f / std::sqrt(float(HS)));
  ZT_CUDA_LAUNCH_CHECK();
}

template <typename T, int HS>
void launch_backward(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D, int B, int T_, int C,
                     int NH, int NKV, cudaStream_t s) {
  const float scale = 1.0f / std::sqrt(float(HS));
  const size_t tiles = fa2::dq_smem(HS, sizeof(T));
  const unsigned blocks = unsigned((T_ + kRows - 1) / kRows);
  auto dkdv = attention_backward_dkdv_fa2_kernel<T, HS>;
  const size_t dkdv_smem = fa2::dkdv_smem(HS, sizeof(T));
  if (dkdv_smem > 48 * 1024)
    ZT_CUDA_CHECK(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dkdv_smem)));
  launch(dkdv, dim3(blocks, unsigned(B * NKV)), 32 * kWarps, dkdv_smem, s, dqkv, dout, qkv, lse, D, T_, C, NH, NKV,
         scale);
  ZT_CUDA_LAUNCH_CHECK();
  auto dq = attention_backward_dq_fa2_kernel<T, HS>;
  if (tiles > 48 * 1024)
    ZT_CUDA_CHECK(cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, int(tiles)));
  launch(dq, dim3(blocks, unsigned(B * NH)), 32 * kWarps, tiles, s, dqkv, dout, qkv, lse, D, T_, C, NH, NKV, scale);
  ZT_CUDA_LAUNCH_CHECK();
}
}  // namespace

template <typename T>
bool attention_forward_fa2_v1(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int NKV, cudaStream_t s) {
  const int hs = C / NH;
  // 16-byte copies need 16-byte aligned rows: the base, and every row and head offset
  const bool aligned = reinterpret_cast<uintptr_t>(qkv) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 4 == 0;
  if (!aligned || (hs != 64 && hs != 128) || B * T_ <= 0) return false;
  if (hs == 64) launch_forward<T, 64>(out, lse, qkv, B, T_, C, NH, NKV, s);
  else launch_forward<T, 128>(out, lse, qkv, B, T_, C, NH, NKV, s);
  return true;
}

template <typename T>
bool attention_backward_fa2_v1(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D, int B, int T_,
                            int C, int NH, int NKV, cudaStream_t s) {
  const int hs = C / NH;
  const bool aligned = reinterpret_cast<uintptr_t>(qkv) % 16 == 0 && reinterpret_cast<uintptr_t>(dout) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(dqkv) % 4 == 0;
  if (!aligned || (hs != 64 && hs != 128) || B * T_ <= 0) return false;
  if (hs == 64) launch_backward<T, 64>(dqkv, dout, qkv, lse, D, B, T_, C, NH, NKV, s);
  else launch_backward<T, 128>(dqkv, dout, qkv, lse, D, B, T_, C, NH, NKV, s);
  return true;
}

template bool attention_backward_fa2_v1<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                                                    const float*, const float*, int, int, int, int, int, cudaStream_t);
template bool attention_backward_fa2_v1<__half>(__half*, const __half*, const __half*, const float*, const float*, int,
                                             int, int, int, int, cudaStream_t);
template bool attention_forward_fa2_v1<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*, int, int, int, int,
                                                   int, cudaStream_t);
template bool attention_forward_fa2_v1<__half>(__half*, float*, const __half*, int, int, int, int, int, cudaStream_t);

}  // namespace zt::cuda
