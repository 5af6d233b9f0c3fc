// One file over 600 lines on purpose: the forward, the two backward passes and their launches
// share the tile walk and its classes (skipped, masked, clean; by the diagonal and by the
// documents' starts), which must change together.
// Causal attention in FlashAttention-2's structure on mma.sync tensor cores, with the fragments
// read from shared memory by ldmatrix (bf16 / fp16, head size 64 or 128); the default attention
// where it applies. What changed from the first generation (attention_fa2_v1.cu until b76f2b9;
// this one measured 1.28-1.76x faster on the H200, docs/gpus.md):
// - every B fragment (K, V, Q, dO) and every A fragment read from shared memory comes from one
//   ldmatrix.x4 per two mma (.trans where the tile is k-major: V in P V, dO and Q in dV and dK,
//   K in dQ), where the first generation issued two 32-bit or four 16-bit loads per mma;
// - the forward's warps take 32 query rows at head size 64 (fa2::forward_m_tiles), so each
//   fragment read feeds two mma;
// - the causal mask is computed only on tiles that cross the diagonal, and tiles wholly past a
//   warp's rows are skipped;
// - the forward and dQ launch the query tiles with the most K/V tiles first, so the grid does not
//   end on a tail of heavy blocks (the dK/dV kernel's first key tiles are its heavy ones already).
// The plan is otherwise the first generation's: Q (and dO) rows as A fragments in registers for the
// whole kernel, K/V (or Q/dO) tiles streamed through shared memory with cp.async, double
// buffered; S, P, dP and dS never leave registers (C fragments become A fragments two n-blocks
// at a time); P and dS rounded to T before their products, as in FlashAttention. The backward is
// FlashAttention-2's 5 matrix-product units (S, dP, dV, dK and dQ in the dK/dV pass, dQ summed in
// fp32 with atomics), or under [run] deterministic 7 (a dQ pass recomputes S and dP, no atomics).
// Packed documents (pos, cpu/ops.h; cu_seqlens in FlashAttention's terms) compile a second
// instance of each kernel (kDocs): a row attends to keys [first, row], `first` its document's
// start. Tiles wholly before a block's or a warp's documents are skipped, as tiles past the
// diagonal are, and the mask's compare runs only on tiles that cross a boundary or the diagonal.
// Fragment layouts: attention_fa2_tiles.cuh; ldmatrix's: ptx.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/backend/cuda/attention_fa2_layout.h"
#include "engine/backend/cuda/attention_fa2_tiles.cuh"
#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/launch.cuh"
#include "engine/backend/cuda/ops.cuh"
#include "engine/backend/cuda/ptx.cuh"

namespace zt::cuda {

namespace {
using fa2::a_from_c;
using fa2::Heads;
using fa2::kKeys;
using fa2::kRows;
using fa2::kWarps;
using fa2::load_a_rows;
using fa2::load_rows;
using fa2::pack2;

constexpr float kLog2e = 1.4426950408889634f;
// attention_fa2_layout.h's sizes as compile-time constants the kernels can use (host constexpr
// functions are not callable from device code; a variable template is evaluated at compile time)
template <int HS>
constexpr int kLdOf = int(fa2::padded_row(HS));
template <int HS>
constexpr int kMTilesOf = fa2::forward_m_tiles(HS);
template <int HS>
constexpr int kForwardRowsOf = fa2::forward_rows(HS);
template <int HS>
constexpr int kDkdvRowsOf = fa2::dkdv_query_rows(HS);
template <bool kDocs>
constexpr int kStatsOf = fa2::dkdv_stat_rows(kDocs);

// B fragments of two k-steps for n-block rows [n0, n0 + 8) of a shared (n, kLd) tile that holds
// B transposed (row n = column n of B, as K in Q K^T): b[0], b[1] = k-step k0, b[2], b[3] = k0 + 16.
// Matrix i = lane / 8 is rows n0 .. n0 + 7, columns k0 + 8 i .. + 7.
template <typename T, int kLd>
__device__ __forceinline__ void ldsm_b_nk(uint32_t (&b)[4], const T* tile, int n0, int k0, int lane) {
  ldmatrix<4>(b, tile + (n0 + lane % 8) * kLd + k0 + (lane / 8) * 8);
}

// B fragments of k-step [k0, k0 + 16) for two n-blocks n0, n0 + 8 of a shared (k, kLd) tile that
// holds B as it is (row k, as V in P V): b[0], b[1] = n-block n0, b[2], b[3] = n0 + 8. Matrix i is
// rows k0 + 8 (i % 2) .. + 7, columns n0 + 8 (i / 2) .. + 7, transposed by ldmatrix.
template <typename T, int kLd>
__device__ __forceinline__ void ldsm_b_kn(uint32_t (&b)[4], const T* tile, int k0, int n0, int lane) {
  const int i = lane / 8;
  ldmatrix<4, true>(b, tile + (k0 + (i % 2) * 8 + lane % 8) * kLd + n0 + (i / 2) * 8);
}

// The A fragment of rows [r0, r0 + 16), k-step [k0, k0 + 16) of a shared row-major (.., kLd) tile:
// matrix i is rows r0 + 8 (i % 2), columns k0 + 8 (i / 2) (a0..a3's order)
template <typename T, int kLd>
__device__ __forceinline__ void ldsm_a(uint32_t (&a)[4], const T* tile, int r0, int k0, int lane) {
  const int i = lane / 8;
  ldmatrix<4>(a, tile + (r0 + (i % 2) * 8 + lane % 8) * kLd + k0 + (i / 2) * 8);
}

// c[m] (16 x 8 NB, fp32) += a[m] (16 x HS, A fragments) times the transpose of a shared (8 NB, HS)
// tile, for M m-tiles that share every B fragment read
template <typename T, int HS, int kLd, int M, int NB>
__device__ __forceinline__ void a_times_tile_t(float (&c)[M][NB][4], const uint32_t (&a)[M][HS / 16][4],
                                               const T* tile, int lane) {
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk += 2) {
      uint32_t b[4];
      ldsm_b_nk<T, kLd>(b, tile, nb * 8, kk * 16, lane);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        mma16816<T>(c[m][nb], a[m][kk], b[0], b[1]);
        mma16816<T>(c[m][nb], a[m][kk + 1], b[2], b[3]);
      }
    }
}

// The same with the A rows read from a shared tile (rows [r0, r0 + 16) of `rows`) as needed
template <typename T, int HS, int kLd, int NB>
__device__ __forceinline__ void rows_times_tile_t(float (&c)[NB][4], const T* rows, int r0, const T* tile, int lane) {
#pragma unroll
  for (int kk = 0; kk < HS / 16; kk += 2) {
    uint32_t a0[4], a1[4];
    ldsm_a<T, kLd>(a0, rows, r0, kk * 16, lane);
    ldsm_a<T, kLd>(a1, rows, r0, kk * 16 + 16, lane);
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      uint32_t b[4];
      ldsm_b_nk<T, kLd>(b, tile, nb * 8, kk * 16, lane);
      mma16816<T>(c[nb], a0, b[0], b[1]);
      mma16816<T>(c[nb], a1, b[2], b[3]);
    }
  }
}

// o[m] (16 x HS, fp32) += p[m] (16 x 8 NS: accumulators, rounded to T as A fragments) times a
// shared (8 NS, HS) tile, for M m-tiles that share every B fragment read
template <typename T, int HS, int kLd, int M, int NS>
__device__ __forceinline__ void c_times_tile(float (&o)[M][HS / 8][4], const float (&p)[M][NS][4], const T* tile,
                                             int lane) {
#pragma unroll
  for (int kk = 0; kk < NS / 2; ++kk) {
    uint32_t pa[M][4];
#pragma unroll
    for (int m = 0; m < M; ++m) a_from_c<T>(pa[m], p[m], kk);
#pragma unroll
    for (int dn = 0; dn < HS / 8; dn += 2) {
      uint32_t b[4];
      ldsm_b_kn<T, kLd>(b, tile, kk * 16, dn * 8, lane);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        mma16816<T>(o[m][dn], pa[m], b[0], b[1]);
        mma16816<T>(o[m][dn + 1], pa[m], b[2], b[3]);
      }
    }
  }
}

// rows [t0, t0 + 64) of K and V (zeros past T) into shared tiles of (64, HS + 8)
template <typename T, int HS>
__device__ void load_kv(T* Ks, T* Vs, const T* qkv, const Heads& H, int t0, int T_) {
  load_rows<T, HS>(Ks, qkv + H.k, H.row, t0, T_);
  load_rows<T, HS>(Vs, qkv + H.v, H.row, t0, T_);
}

// ---- Forward. A block of 4 warps takes fa2::forward_rows(HS) queries, 16 M per warp (M m-tiles);
// each warp's rows are [w0, w0 + 16 M), a thread's are w0 + 16 m + g and + 8.
template <typename T, int HS, bool kDocs>
__global__ void __launch_bounds__(32 * kWarps)
    attention_forward_fa2_kernel(T* out, float* lse, const T* qkv, int T_, int C, int NH, int NKV, float scale,
                                 const int32_t* pos) {
  constexpr int kLd = kLdOf<HS>, kM = kMTilesOf<HS>, kWarpRows = 16 * kM;
  constexpr int kBlockRows = kForwardRowsOf<HS>, kTile = kKeys * kLd;
  extern __shared__ __align__(16) unsigned char smem[];
  T* tiles = reinterpret_cast<T*>(smem);  // [2 buffers][K, V][64][kLd]
  const Heads H(T_, C, NH, NKV, HS, blockIdx.y);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  // heavy blocks first: block 0 takes the last query tile, which reads every K/V tile
  const int q0 = int(gridDim.x - 1 - blockIdx.x) * kBlockRows, w0 = q0 + warp * kWarpRows;
  const int warp_last = w0 + kWarpRows - 1;
  const float scale_log2 = scale * kLog2e;  // softmax in base 2: exp2_ftz
  // the first key of row t (rows past T take the last row's): non-decreasing in t
  const int b = blockIdx.y / NH;
  auto first_of = [&](int t) { return kDocs ? doc_first(pos, b, T_, min(t, T_ - 1)) : 0; };
  [[maybe_unused]] int rf[kM][2];  // kDocs: the first key of each of the thread's rows
  if constexpr (kDocs)
#pragma unroll
    for (int m = 0; m < kM; ++m) rf[m][0] = first_of(w0 + 16 * m + g), rf[m][1] = first_of(w0 + 16 * m + g + 8);
  const int warp_first = first_of(w0), warp_first_last = first_of(warp_last);

  uint32_t qa[kM][HS / 16][4];  // this warp's Q rows as A fragments
#pragma unroll
  for (int m = 0; m < kM; ++m) load_a_rows<T, HS>(qa[m], qkv + H.q, H.row, w0 + 16 * m + g, T_, q);
  float o[kM][HS / 8][4] = {};  // O (16 M x HS) of this warp, fp32
  float mx[kM][2], l[kM][2];    // running maxima (base 2) of the thread's rows; its part of the sums
#pragma unroll
  for (int m = 0; m < kM; ++m) mx[m][0] = mx[m][1] = -INFINITY, l[m][0] = l[m][1] = 0;

  const int last_q = min(q0 + kBlockRows, T_) - 1, n_tiles = last_q / kKeys + 1;
  const int j0 = first_of(q0) / kKeys;  // the tile of the block's first document start
  load_kv<T, HS>(tiles + (j0 % 2) * 2 * kTile, tiles + (j0 % 2) * 2 * kTile + kTile, qkv, H, j0 * kKeys, T_);
  cp_async_commit();
  for (int j = j0; j < n_tiles; ++j) {
    const T* Ks = tiles + (j % 2) * 2 * kTile;
    const T* Vs = Ks + kTile;
    if (j + 1 < n_tiles) {  // the next tile into the other buffer while this one computes
      T* nK = tiles + ((j + 1) % 2) * 2 * kTile;
      load_kv<T, HS>(nK, nK + kTile, qkv, H, (j + 1) * kKeys, T_);
    }
    cp_async_commit();
    cp_async_wait<1>();  // all but the newest group: tile j is in
    __syncthreads();
    const int k0 = j * kKeys;
    // One tile of keys: S (16 M x 64) = Q K^T in 8 n-blocks of 8 keys, the online softmax, O += P V.
    // Compiled twice: the causal mask's compare and select only in the tiles that cross this warp's
    // diagonal (some key after some row), at most 1 + kWarpRows / 64 of them per warp, or (kDocs)
    // the start of one of its rows' documents.
    auto tile = [&](auto masked) {
      constexpr bool diagonal = decltype(masked)::value;
      float s[kM][kKeys / 8][4] = {};
      a_times_tile_t<T, HS, kLd>(s, qa, Ks, lane);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        [[maybe_unused]] const int r0 = w0 + 16 * m + g, r1 = r0 + 8;
        float mx0 = -INFINITY, mx1 = -INFINITY;  // scale, mask, row maxima (a row sits in the 4 lanes of a quad)
#pragma unroll
        for (int nb = 0; nb < kKeys / 8; ++nb)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            [[maybe_unused]] const int key = k0 + nb * 8 + 2 * q + (i % 2);
            float& v = s[m][nb][i];
            if constexpr (diagonal && kDocs)
              v = key <= (i < 2 ? r0 : r1) && key >= rf[m][i / 2] ? v * scale_log2 : -INFINITY;
            else if constexpr (diagonal) v = key <= (i < 2 ? r0 : r1) ? v * scale_log2 : -INFINITY;
            else v *= scale_log2;
            if (i < 2) mx0 = fmaxf(mx0, v);
            else mx1 = fmaxf(mx1, v);
          }
        for (int off = 1; off <= 2; off *= 2) {
          mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
          mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
        }
        // tile 0 holds key 0 <= every row, and every warp computes it: the maxima are finite from it on.
        // With documents a row's first tiles may hold none of its keys: its maximum stays -inf, and
        // the exponentials are taken from 0 instead (all 0, where -inf - -inf would be NaN).
        const float n0 = fmaxf(mx[m][0], mx0), n1 = fmaxf(mx[m][1], mx1);
        float e0 = n0, e1 = n1;  // the exponentials' base
        if constexpr (kDocs && diagonal) e0 = n0 == -INFINITY ? 0.0f : n0, e1 = n1 == -INFINITY ? 0.0f : n1;
        const float c0 = exp2_ftz(mx[m][0] - e0), c1 = exp2_ftz(mx[m][1] - e1);  // 0 on the first tile (m = -inf)
        mx[m][0] = n0, mx[m][1] = n1;
        float sum0 = 0, sum1 = 0;
#pragma unroll
        for (int nb = 0; nb < kKeys / 8; ++nb) {
          s[m][nb][0] = exp2_ftz(s[m][nb][0] - e0), s[m][nb][1] = exp2_ftz(s[m][nb][1] - e0);
          s[m][nb][2] = exp2_ftz(s[m][nb][2] - e1), s[m][nb][3] = exp2_ftz(s[m][nb][3] - e1);
          sum0 += s[m][nb][0] + s[m][nb][1], sum1 += s[m][nb][2] + s[m][nb][3];
        }
        l[m][0] = l[m][0] * c0 + sum0, l[m][1] = l[m][1] * c1 + sum1;
#pragma unroll
        for (int dn = 0; dn < HS / 8; ++dn)
          o[m][dn][0] *= c0, o[m][dn][1] *= c0, o[m][dn][2] *= c1, o[m][dn][3] *= c1;
      }
      // O += P V: P's accumulators of n-blocks 2 kk and 2 kk + 1 are the A fragment of key step kk
      c_times_tile<T, HS, kLd>(o, s, Vs, lane);
    };
    // (warp-uniform) keys all after this warp's rows, or all before its rows' documents, add nothing
    if (k0 > warp_last || k0 + kKeys - 1 < warp_first) {
    } else if (k0 + kKeys - 1 > w0 || k0 < warp_first_last) {  // on the diagonal or a document's start
      tile(std::true_type{});
    } else {
      tile(std::false_type{});
    }
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }
  cp_async_wait<0>();

  const float ln2 = 0.6931471805599453f;
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    float l0 = l[m][0], l1 = l[m][1];
    for (int off = 1; off <= 2; off *= 2) {
      l0 += __shfl_xor_sync(0xffffffffu, l0, off);
      l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    for (int half = 0; half < 2; ++half) {
      const int r = w0 + 16 * m + g + 8 * half;
      if (r >= T_) continue;
      const float sum = half ? l1 : l0, inv = 1.0f / sum;
      T* dst = out + H.o + int64_t(r) * C + 2 * q;
#pragma unroll
      for (int dn = 0; dn < HS / 8; ++dn)
        *reinterpret_cast<uint32_t*>(dst + dn * 8) =
            pack2<T>(o[m][dn][2 * half] * inv, o[m][dn][2 * half + 1] * inv);
      if (q == 0) lse[H.stat + r] = mx[m][half] * ln2 + logf(sum);
    }
  }
}

// dQ rows [t0, t0 + KQ) of one query head (acc: that head's (T, C)-strided fp32 rows) += dS K, dS
// from a shared dS^T (64 keys, kLdS) and K from a shared (64 keys, kLd) tile. Warp w takes the rows
// 16 (w % (KQ / 16)) .. + 15 and the columns 64 (w / (KQ / 16)) .. + 63: HS / 64 = 4 / (KQ / 16).
template <typename T, int HS, int kLd, int kLdS, int KQ>
__device__ __forceinline__ void dq_tile_accumulate(float* acc, const T* dst_tile, const T* Ks, int t0, int T_, int C,
                                                   int warp, int lane) {
  static_assert((KQ / 16) * (HS / 64) == kWarps, "the warps tile the (KQ, HS) dQ tile in 16 x 64 pieces");
  const int m0 = (warp % (KQ / 16)) * 16, n0 = (warp / (KQ / 16)) * 64, g = lane / 4, qd = lane % 4;
  float c[8][4] = {};
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    // A = dS rows m0.., keys 16 kk..: matrix i is queries m0 + 8 (i % 2), keys 16 kk + 8 (i / 2),
    // stored key-major (dS^T), so read transposed
    uint32_t a[4];
    const int i = lane / 8;
    ldmatrix<4, true>(a, dst_tile + (kk * 16 + (i / 2) * 8 + lane % 8) * kLdS + m0 + (i % 2) * 8);
#pragma unroll
    for (int dn = 0; dn < 8; dn += 2) {
      uint32_t bf[4];
      ldsm_b_kn<T, kLd>(bf, Ks, kk * 16, n0 + dn * 8, lane);
      mma16816<T>(c[dn], a, bf[0], bf[1]);
      mma16816<T>(c[dn + 1], a, bf[2], bf[3]);
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int t = t0 + m0 + g + 8 * half;
    if (t >= T_) continue;
    float* row = acc + int64_t(t) * C + n0 + 2 * qd;
#pragma unroll
    for (int dn = 0; dn < 8; ++dn) {
      atomic_add_f32x2(row + dn * 8, c[dn][2 * half], c[dn][2 * half + 1]);  // 8-byte aligned: 2 qd, C and acc even
    }
  }
}

// dqkv's Q columns (B, T, NH hs of each row) = the fp32 dQ accumulator (B, T, C), rounded to T
template <typename T>
__global__ void __launch_bounds__(256)
    dq_from_accumulator_kernel(T* dqkv, const float* acc, int64_t rows, int C, int64_t row_ld) {
  const int64_t pairs = rows * (C / 2);
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = p / (C / 2), c = (p % (C / 2)) * 2;
    const float2 v = *reinterpret_cast<const float2*>(acc + r * C + c);
    *reinterpret_cast<uint32_t*>(dqkv + r * row_ld + c) = pack2<T>(v.x, v.y);
  }
}

// ---- Backward (FlashAttention-2's recurrences): dK/dV parallel over key tiles, each warp holding
// 16 keys' K and V as A fragments (at head size 128: in shared memory, read as needed) and their dK,
// dV in fp32 accumulators while the query tiles (Q, dO, lse, D of every query head of the key/value
// head's group) stream through shared memory; dQ parallel over query tiles, each warp holding 16
// queries' Q and dO as A fragments and dQ in accumulators while K/V tiles stream.

// kDq: the same pass also makes dQ (FlashAttention-2's 5 units): each query tile's dS^T goes to
// shared memory, and after a barrier the 4 warps split the tile's dQ += dS K (kQ x HS over the 64
// keys, 16 rows x 64 columns a warp), added into dq_acc (B, T, C) fp32 with atomics.
template <typename T, int HS, bool kDq, bool kDocs>
__global__ void __launch_bounds__(32 * kWarps)
    attention_backward_dkdv_fa2_kernel(T* dqkv, float* dq_acc, const T* dout, const T* qkv, const float* lse,
                                       const float* D, int T_, int C, int NH, int NKV, float scale,
                                       const int32_t* pos) {
  constexpr int kLd = kLdOf<HS>, kQ = kDkdvRowsOf<HS>, kTile = kQ * kLd, kKvTile = kKeys * kLd;
  constexpr bool kSharedKV = HS > 64;  // K and V rows in shared memory rather than registers
  constexpr int kLdS = kQ + 8;         // dS^T's padded rows
  constexpr int kStats = kStatsOf<kDocs>;  // lse2, D (and kDocs: the first keys) of each query
  extern __shared__ __align__(16) unsigned char smem[];
  T* tiles = reinterpret_cast<T*>(smem);                                          // [2][Q, dO][kQ][kLd]
  float* stats = reinterpret_cast<float*>(smem + size_t(4) * kTile * sizeof(T));  // [2][kStats][kQ]
  T* kv = reinterpret_cast<T*>(stats + 2 * kStats * kQ);  // kSharedKV: [K, V][64][kLd]; else with kDq: K [64][kLd]
  T* dst_tile = kv + (kSharedKV ? 2 : kDq ? 1 : 0) * kKvTile;                    // kDq: dS^T [64 keys][kLdS]
  const int b = blockIdx.y / NKV, kvh = blockIdx.y % NKV, group = NH / NKV;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, qd = lane % 4;
  const int k0 = blockIdx.x * kKeys, kw0 = k0 + warp * 16, kr0 = kw0 + g, kr1 = kr0 + 8;  // this thread's two keys
  const float scale_log2 = scale * kLog2e;
  const Heads H0(T_, C, NH, NKV, HS, b, kvh * group);  // the key/value head's offsets
  uint32_t ka[1][kSharedKV ? 1 : HS / 16][4], va[1][kSharedKV ? 1 : HS / 16][4];
  if constexpr (kSharedKV) {
    load_rows<T, HS>(kv, qkv + H0.k, H0.row, k0, T_);  // in the first cp.async group, with tile 0
    load_rows<T, HS>(kv + kKvTile, qkv + H0.v, H0.row, k0, T_);
  } else {
    if constexpr (kDq) load_rows<T, HS>(kv, qkv + H0.k, H0.row, k0, T_);  // dQ's B operand
    load_a_rows<T, HS>(ka[0], qkv + H0.k, H0.row, kr0, T_, qd);
    load_a_rows<T, HS>(va[0], qkv + H0.v, H0.row, kr0, T_, qd);
  }
  float dk[1][HS / 8][4] = {}, dv[1][HS / 8][4] = {};
  // the first key of query t, non-decreasing in t
  auto first_of = [&](int t) { return kDocs ? doc_first(pos, b, T_, min(t, T_ - 1)) : 0; };
  // queries past the last whose document starts at or before these keys see none of them
  int t_end = T_;
  if constexpr (kDocs) {
    int lo = k0, hi = T_;  // the first query whose document starts after key k0 + 63
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (first_of(mid) > k0 + kKeys - 1) hi = mid;
      else lo = mid + 1;
    }
    t_end = lo;
  }
  const int first = k0 / kQ, n_tiles = max(0, (t_end + kQ - 1) / kQ - first);  // query tiles at or after the keys
  const int total = group * n_tiles;  // (query head, query tile) pairs, streamed in that order
  auto load = [&](int i, int buf) {
    const Heads H(T_, C, NH, NKV, HS, b, kvh * group + i / n_tiles);
    const int t0 = (first + i % n_tiles) * kQ;
    T* Qs = tiles + buf * 2 * kTile;
    load_rows<T, HS, kQ>(Qs, qkv + H.q, H.row, t0, T_);
    load_rows<T, HS, kQ>(Qs + kTile, dout + H.o, C, t0, T_);
    float* st = stats + buf * kStats * kQ;
    for (int r = threadIdx.x; r < kQ; r += blockDim.x) {
      const int t = t0 + r;
      st[r] = t < T_ ? lse[H.stat + t] * kLog2e : INFINITY;  // past T: P = 0
      st[kQ + r] = t < T_ ? D[H.stat + t] : 0.0f;
      if constexpr (kDocs) reinterpret_cast<int*>(st)[2 * kQ + r] = first_of(t);
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
    const float* L2 = stats + buf * kStats * kQ;
    const float* Dq = L2 + kQ;
    [[maybe_unused]] const int* Fq = reinterpret_cast<const int*>(L2 + 2 * kQ);  // kDocs: the queries' first keys
    const int t0 = (first + i % n_tiles) * kQ;
    const int qh = kvh * group + i / n_tiles;  // this tile's query head
    // S^T (16 keys x kQ queries) = K Q^T and dP^T = V dO^T
    float st[1][kQ / 8][4] = {}, dpt[1][kQ / 8][4] = {};
    if constexpr (kSharedKV) {
      rows_times_tile_t<T, HS, kLd>(st[0], kv, warp * 16, Qs, lane);
      rows_times_tile_t<T, HS, kLd>(dpt[0], kv + kKvTile, warp * 16, dOs, lane);
    } else {
      a_times_tile_t<T, HS, kLd>(st, ka, Qs, lane);
      a_times_tile_t<T, HS, kLd>(dpt, va, dOs, lane);
    }
    // P^T = exp(S scale - lse), masked only where some query of the tile precedes some key of the
    // warp, or (kDocs) some query's document starts after some key of the warp; dS^T = P^T (dP^T - D) scale
    const bool diagonal = t0 < kw0 + 15 || (kDocs && Fq[kQ - 1] > kw0);  // the tile's last query's document
#pragma unroll
    for (int nb = 0; nb < kQ / 8; ++nb) {
      const int col = nb * 8 + 2 * qd;
      const float2 l2 = *reinterpret_cast<const float2*>(L2 + col), dq = *reinterpret_cast<const float2*>(Dq + col);
#pragma unroll
      for (int i2 = 0; i2 < 4; ++i2) {
        const int key = i2 < 2 ? kr0 : kr1;
        const float lv = i2 % 2 ? l2.y : l2.x, dv_ = i2 % 2 ? dq.y : dq.x;
        bool keep = !diagonal || key <= t0 + col + i2 % 2;
        if constexpr (kDocs) keep = keep && (!diagonal || key >= Fq[col + i2 % 2]);
        const float p = keep ? exp2_ftz(st[0][nb][i2] * scale_log2 - lv) : 0.0f;
        st[0][nb][i2] = p;
        dpt[0][nb][i2] = p * (dpt[0][nb][i2] - dv_) * scale;
      }
    }
    // dV += P^T dO and dK += dS^T Q over the kQ queries, 16 at a time
    c_times_tile<T, HS, kLd>(dv, st, dOs, lane);
    c_times_tile<T, HS, kLd>(dk, dpt, Qs, lane);
    if constexpr (kDq) {
      // this warp's 16 keys of dS^T, rounded to T as for dK (32-bit stores: two queries side by side)
#pragma unroll
      for (int nb = 0; nb < kQ / 8; ++nb) {
        T* d = dst_tile + (warp * 16 + g) * kLdS + nb * 8 + 2 * qd;
        *reinterpret_cast<uint32_t*>(d) = pack2<T>(dpt[0][nb][0], dpt[0][nb][1]);
        *reinterpret_cast<uint32_t*>(d + 8 * kLdS) = pack2<T>(dpt[0][nb][2], dpt[0][nb][3]);
      }
      __syncthreads();  // the whole tile's dS^T, all 64 keys, before any warp's dQ reads it
      dq_tile_accumulate<T, HS, kLd, kLdS, kQ>(dq_acc + (int64_t(b) * T_ * C + int64_t(qh) * HS), dst_tile, kv,
                                                 t0, T_, C, warp, lane);
    }
    __syncthreads();  // every warp is done with this buffer (and dS^T) before it is refilled
  }
  cp_async_wait<0>();
  for (int half = 0; half < 2; ++half) {
    const int r = half ? kr1 : kr0;
    if (r >= T_) continue;
    T* dkr = dqkv + H0.k + int64_t(r) * H0.row + 2 * qd;
    T* dvr = dqkv + H0.v + int64_t(r) * H0.row + 2 * qd;
    for (int dn = 0; dn < HS / 8; ++dn) {
      *reinterpret_cast<uint32_t*>(dkr + dn * 8) = pack2<T>(dk[0][dn][2 * half], dk[0][dn][2 * half + 1]);
      *reinterpret_cast<uint32_t*>(dvr + dn * 8) = pack2<T>(dv[0][dn][2 * half], dv[0][dn][2 * half + 1]);
    }
  }
}

template <typename T, int HS, bool kDocs>
__global__ void __launch_bounds__(32 * kWarps)
    attention_backward_dq_fa2_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D, int T_,
                                     int C, int NH, int NKV, float scale, const int32_t* pos) {
  constexpr int kLd = kLdOf<HS>, kTile = kKeys * kLd;
  extern __shared__ __align__(16) unsigned char smem[];
  T* tiles = reinterpret_cast<T*>(smem);  // [2][K, V][64][kLd]
  // kDocs: each of the block's rows' first key, in shared memory rather than registers (at head
  // size 128 this kernel is at 255 registers)
  [[maybe_unused]] int* firsts = reinterpret_cast<int*>(tiles + 4 * kTile);  // [kRows]
  const Heads H(T_, C, NH, NKV, HS, blockIdx.y);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, qd = lane % 4;
  // heavy blocks first, as in the forward
  const int q0 = int(gridDim.x - 1 - blockIdx.x) * kRows, w0 = q0 + warp * 16, row0 = w0 + g, row1 = row0 + 8;
  if constexpr (kDocs)  // seen by every warp after the first tile's barrier
    for (int r = threadIdx.x; r < kRows; r += blockDim.x) firsts[r] = doc_first(pos, blockIdx.y / NH, T_, min(q0 + r, T_ - 1));
  const float scale_log2 = scale * kLog2e;
  uint32_t qa[1][HS / 16][4], oa[1][HS / 16][4];
  load_a_rows<T, HS>(qa[0], qkv + H.q, H.row, row0, T_, qd);
  load_a_rows<T, HS>(oa[0], dout + H.o, C, row0, T_, qd);
  const float l0 = row0 < T_ ? lse[H.stat + row0] * kLog2e : 0.0f;
  const float l1 = row1 < T_ ? lse[H.stat + row1] * kLog2e : 0.0f;
  const float d0 = row0 < T_ ? D[H.stat + row0] : 0.0f, d1 = row1 < T_ ? D[H.stat + row1] : 0.0f;
  float dq[1][HS / 8][4] = {};
  const int last_q = min(q0 + kRows, T_) - 1, n_tiles = last_q / kKeys + 1;
  const int j0 = kDocs ? doc_first(pos, blockIdx.y / NH, T_, q0) / kKeys : 0;  // the tile of the block's first document start
  load_kv<T, HS>(tiles + (j0 % 2) * 2 * kTile, tiles + (j0 % 2) * 2 * kTile + kTile, qkv, H, j0 * kKeys, T_);
  cp_async_commit();
  for (int j = j0; j < n_tiles; ++j) {
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
    // (warp-uniform) keys all after this warp's rows, or all before its rows' documents, add nothing
    if (k0 <= w0 + 15 && (!kDocs || k0 + kKeys - 1 >= firsts[warp * 16])) {
      // S = Q K^T and dP = dO V^T (16 queries x 64 keys)
      float s[1][kKeys / 8][4] = {}, dp[1][kKeys / 8][4] = {};
      a_times_tile_t<T, HS, kLd>(s, qa, Ks, lane);
      a_times_tile_t<T, HS, kLd>(dp, oa, Vs, lane);
      // P = exp(S scale - lse), masked only on the diagonal; dS = P (dP - D) scale
      const bool diagonal = k0 + kKeys - 1 > w0 || (kDocs && k0 < firsts[warp * 16 + 15]);
#pragma unroll
      for (int nb = 0; nb < kKeys / 8; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = k0 + nb * 8 + 2 * qd + (i % 2), r = i < 2 ? row0 : row1;
          // exp2f, not exp2_ftz: at head size 128 this kernel sits at 255 registers, and the ftz form's
          // schedule spills 40 bytes there (tools/kernel_report.py)
          bool keep = !diagonal || key <= r;
          if constexpr (kDocs) keep = keep && (!diagonal || key >= firsts[r - q0]);
          const float p = keep && r < T_ ? exp2f(s[0][nb][i] * scale_log2 - (i < 2 ? l0 : l1)) : 0.0f;
          dp[0][nb][i] = p * (dp[0][nb][i] - (i < 2 ? d0 : d1)) * scale;
        }
      // dQ += dS K (K's tile is k-major here: the transposed reads)
      c_times_tile<T, HS, kLd>(dq, dp, Ks, lane);
    }
    __syncthreads();
  }
  cp_async_wait<0>();
  for (int half = 0; half < 2; ++half) {
    const int r = half ? row1 : row0;
    if (r >= T_) continue;
    T* dst = dqkv + H.q + int64_t(r) * H.row + 2 * qd;
    for (int dn = 0; dn < HS / 8; ++dn)
      *reinterpret_cast<uint32_t*>(dst + dn * 8) = pack2<T>(dq[0][dn][2 * half], dq[0][dn][2 * half + 1]);
  }
}

// Dynamic shared memory above the 48 KiB default needs an opt-in per kernel.
template <typename K>
void allow_smem(K kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

template <typename T, int HS, bool kDocs>
void launch_forward(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int NKV, const int32_t* pos,
                    cudaStream_t s) {
  const size_t smem = fa2::forward_smem(HS, sizeof(T));
  auto kernel = attention_forward_fa2_kernel<T, HS, kDocs>;
  allow_smem(kernel, smem);
  const int rows = fa2::forward_rows(HS);
  const dim3 grid(unsigned((T_ + rows - 1) / rows), unsigned(B * NH));
  launch(kernel, grid, 32 * kWarps, smem, s, out, lse, qkv, T_, C, NH, NKV, 1.0f / std::sqrt(float(HS)), pos);
  ZT_CUDA_LAUNCH_CHECK();
}

// dq_acc: (B, T, C) fp32 scratch for the 5-unit backward; null: the 7-unit one (no atomics)
template <typename T, int HS, bool kDocs>
void launch_backward(T* dqkv, float* dq_acc, const T* dout, const T* qkv, const float* lse, const float* D, int B,
                     int T_, int C, int NH, int NKV, const int32_t* pos, cudaStream_t s) {
  const float scale = 1.0f / std::sqrt(float(HS));
  const unsigned blocks = unsigned((T_ + kRows - 1) / kRows);  // key tiles (dK/dV), query tiles (dQ): both 64
  const dim3 kv_grid(blocks, unsigned(B * NKV));
  if (dq_acc) {
    ZT_CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, size_t(B) * T_ * C * sizeof(float), s));
    auto dkdv = attention_backward_dkdv_fa2_kernel<T, HS, true, kDocs>;
    const size_t smem = fa2::dkdv_smem(HS, sizeof(T), /*dq=*/true, kDocs);
    allow_smem(dkdv, smem);
    launch(dkdv, kv_grid, 32 * kWarps, smem, s, dqkv, dq_acc, dout, qkv, lse, D, T_, C, NH, NKV, scale, pos);
    ZT_CUDA_LAUNCH_CHECK();
    const int64_t rows = int64_t(B) * T_;
    launch(dq_from_accumulator_kernel<T>, blocks_for(rows * (C / 2), 256), 256, 0, s, dqkv, (const float*)dq_acc, rows,
           C, int64_t(NH + 2 * NKV) * HS);
    ZT_CUDA_LAUNCH_CHECK();
    return;
  }
  auto dkdv = attention_backward_dkdv_fa2_kernel<T, HS, false, kDocs>;
  const size_t dkdv_smem = fa2::dkdv_smem(HS, sizeof(T), /*dq=*/false, kDocs);
  allow_smem(dkdv, dkdv_smem);
  launch(dkdv, kv_grid, 32 * kWarps, dkdv_smem, s, dqkv, dq_acc, dout, qkv, lse, D, T_, C, NH, NKV, scale, pos);
  ZT_CUDA_LAUNCH_CHECK();
  auto dq = attention_backward_dq_fa2_kernel<T, HS, kDocs>;
  const size_t dq_smem = fa2::dq_smem(HS, sizeof(T), kDocs);
  allow_smem(dq, dq_smem);
  launch(dq, dim3(blocks, unsigned(B * NH)), 32 * kWarps, dq_smem, s, dqkv, dout, qkv, lse, D, T_, C, NH, NKV, scale,
         pos);
  ZT_CUDA_LAUNCH_CHECK();
}
}  // namespace

template <typename T>
bool attention_forward_fa2(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int NKV, const int32_t* pos,
                           cudaStream_t s) {
  const int hs = C / NH;
  // 16-byte copies need 16-byte aligned rows: the base, and every row and head offset
  const bool aligned = reinterpret_cast<uintptr_t>(qkv) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 4 == 0;
  if (!aligned || (hs != 64 && hs != 128) || B * T_ <= 0) return false;
  if (pos && hs == 64) launch_forward<T, 64, true>(out, lse, qkv, B, T_, C, NH, NKV, pos, s);
  else if (pos) launch_forward<T, 128, true>(out, lse, qkv, B, T_, C, NH, NKV, pos, s);
  else if (hs == 64) launch_forward<T, 64, false>(out, lse, qkv, B, T_, C, NH, NKV, nullptr, s);
  else launch_forward<T, 128, false>(out, lse, qkv, B, T_, C, NH, NKV, nullptr, s);
  return true;
}

template <typename T>
bool attention_backward_fa2(T* dqkv, float* dq_acc, const T* dout, const T* qkv, const float* lse, const float* D,
                            int B, int T_, int C, int NH, int NKV, const int32_t* pos, cudaStream_t s) {
  const int hs = C / NH;
  const bool aligned = reinterpret_cast<uintptr_t>(qkv) % 16 == 0 && reinterpret_cast<uintptr_t>(dout) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(dqkv) % 4 == 0 && reinterpret_cast<uintptr_t>(dq_acc) % 8 == 0;
  if (!aligned || (hs != 64 && hs != 128) || B * T_ <= 0) return false;
  if (pos && hs == 64) launch_backward<T, 64, true>(dqkv, dq_acc, dout, qkv, lse, D, B, T_, C, NH, NKV, pos, s);
  else if (pos) launch_backward<T, 128, true>(dqkv, dq_acc, dout, qkv, lse, D, B, T_, C, NH, NKV, pos, s);
  else if (hs == 64) launch_backward<T, 64, false>(dqkv, dq_acc, dout, qkv, lse, D, B, T_, C, NH, NKV, nullptr, s);
  else launch_backward<T, 128, false>(dqkv, dq_acc, dout, qkv, lse, D, B, T_, C, NH, NKV, nullptr, s);
  return true;
}

template bool attention_backward_fa2<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*,
                                                    const __nv_bfloat16*, const float*, const float*, int, int, int,
                                                    int, int, const int32_t*, cudaStream_t);
template bool attention_backward_fa2<__half>(__half*, float*, const __half*, const __half*, const float*, const float*,
                                             int, int, int, int, int, const int32_t*, cudaStream_t);
template bool attention_forward_fa2<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*, int, int, int, int,
                                                   int, const int32_t*, cudaStream_t);
template bool attention_forward_fa2<__half>(__half*, float*, const __half*, int, int, int, int, int, const int32_t*,
                                            cudaStream_t);

}  // namespace zt::cuda
