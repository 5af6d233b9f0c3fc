// Causal self-attention as fused kernels in the flash-attention style: tiles of 32 queries x 32
// keys staged in shared memory, online softmax, no (T, T) matrix in global memory. Forward saves
// each row's log-sum-exp; backward recomputes probabilities from it (FlashAttention-2's
// recurrences) in two kernels, dK/dV parallel over key tiles and dQ parallel over query tiles, so
// every output element has one writer: no atomics, a fixed summation order.
//
// Layout inside a warp: for scores, lane j takes key j of the tile (or query j, in the dK/dV
// kernel) and computes its whole dot product from shared memory (rows padded to hs + 1 floats so
// the 32 lanes hit 32 banks); for outputs, lane owns dims c = lane + 32 k and takes each
// probability from its lane with a shuffle. Maths in fp32; q, k, v, dout in T.
// Packed documents (pos, cpu/ops.h): each row's keys start at its document's first token; every
// kernel starts its key loop at the tile holding the block's first query's document start, skips
// a row's tiles wholly before its document, and the dK/dV kernels stop at the first query tile
// whose documents all start after their keys.
// Head size up to 128 (KD = ceil(hs / 32) <= 4 dims per lane). For bf16/fp16 and head sizes that
// are multiples of 16, the forward runs on tensor cores instead (attention_forward_tc_kernel).
// Grouped-query attention (NKV key/value heads, each read by NH / NKV query heads): the forward
// and dQ kernels index the key/value head of their query head; the dK/dV kernels run per
// key/value head and loop over the query heads of its group, so dK and dV keep one writer.
// One file over 600 lines on purpose: forward, the two backward kernels and their launch code share
// the tile layout and the online-softmax bookkeeping, which must change together.
#include <mma.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda_limits.h"
#include "engine/backend/cuda/launch.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

// ZTRAIN_ATTENTION picks the kernels, for comparison and as a way back: unset, cuDNN's fused
// attention or ztrain's kernels by measurement where cuDNN runs (attention_select.cu), else
// ztrain's; "cudnn", cuDNN's wherever it can run (ztrain's elsewhere, said once); "fa2", ztrain's
// FlashAttention-2 kernels (attention_fa2.cu) where they apply (bf16/fp16, head size 64 or 128),
// else the WMMA tensor-core ones below, else the CUDA-core ones; "wmma" skips the first; "simt"
// forces the CUDA-core ones. Any other value is an error, not the default.
const std::string& attention_kernels_choice() {
  static const std::string choice = [] {
    const char* v = std::getenv("ZTRAIN_ATTENTION");
    std::string c = v ? v : "";
    if (c != "" && c != "cudnn" && c != "fa2" && c != "wmma" && c != "simt")
      fail(__FILE__, __LINE__, "ZTRAIN_ATTENTION", ("'" + c + "' is not one of cudnn, fa2, wmma, simt").c_str());
    return c;
  }();
  return choice;
}

namespace {
constexpr int kTile = 32;                    // queries per block and keys per tile
constexpr int kWarps = 8;                    // each warp owns kTile / kWarps rows
constexpr int kRowsPerWarp = kTile / kWarps;
constexpr int kMaxHead = kCudaAttentionMaxHead;

// Where query head h of sequence b lives in qkv (B,T,(NH + 2 NKV) hs) / out (B,T,C) / lse (B,NH,T),
// and its key/value head h / (NH / NKV).
struct Geo {
  int T, C, NH, NKV, hs, ld;
  int b, h, kvh;
  int64_t row;  // elements per (b, t) row of qkv
  __device__ Geo(int T_, int C_, int NH_, int NKV_, int bh)
      : T(T_), C(C_), NH(NH_), NKV(NKV_), hs(C_ / NH_), ld(C_ / NH_ + 1) {
    b = bh / NH;
    h = bh % NH;
    kvh = h / (NH / NKV);
    row = int64_t(NH + 2 * NKV) * hs;
  }
  __device__ int64_t q(int t) const { return (int64_t(b) * T + t) * row + int64_t(h) * hs; }
  __device__ int64_t k(int t) const { return (int64_t(b) * T + t) * row + C + int64_t(kvh) * hs; }
  __device__ int64_t v(int t) const { return k(t) + int64_t(NKV) * hs; }
  __device__ int64_t o(int t) const { return (int64_t(b) * T + t) * C + int64_t(h) * hs; }
  __device__ int64_t stat(int t) const { return (int64_t(b) * NH + h) * T + t; }
};

// tile (kTile, ld) <- rows [t0, t0 + kTile) of src at offsets off(t), times mul; zero past T.
template <typename T, typename Off>
__device__ void load_tile(float* tile, const T* src, int t0, const Geo& g, float mul, Off off) {
  for (int idx = threadIdx.x; idx < kTile * g.hs; idx += blockDim.x) {
    const int r = idx / g.hs, c = idx % g.hs, t = t0 + r;
    tile[r * g.ld + c] = t < g.T ? to_float(src[off(t) + c]) * mul : 0.0f;
  }
}

__device__ inline float dot_rows(const float* a, const float* b, int hs) {
  float s = 0;
  for (int c = 0; c < hs; ++c) s += a[c] * b[c];
  return s;
}

template <typename T, int KD>
__global__ void __launch_bounds__(32 * kWarps)
    attention_forward_kernel(T* out, float* lse, const T* qkv, int T_, int C, int NH, int NKV, float scale,
                             const int32_t* pos) {
  const Geo g(T_, C, NH, NKV, blockIdx.y);
  const int q0 = blockIdx.x * kTile, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  extern __shared__ float sm[];
  float* Qs = sm;  // (kTile, ld), pre-scaled by 1/sqrt(hs)
  float* Ks = Qs + kTile * g.ld;
  float* Vs = Ks + kTile * g.ld;
  load_tile(Qs, qkv, q0, g, scale, [&](int t) { return g.q(t); });
  float acc[kRowsPerWarp][KD], m[kRowsPerWarp], l[kRowsPerWarp];
  int first[kRowsPerWarp];  // each row's first key (its document's start)
  #pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int t = q0 + warp * kRowsPerWarp + i;
    first[i] = t < g.T ? doc_first(pos, g.b, g.T, t) : 0;
    m[i] = -INFINITY;
    l[i] = 0;
    #pragma unroll
    for (int k = 0; k < KD; ++k) acc[i][k] = 0;
  }
  const int last_q = min(q0 + kTile, g.T) - 1;
  for (int k0 = doc_first(pos, g.b, g.T, q0) / kTile * kTile; k0 <= last_q; k0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and Q is loaded, on the first pass)
    load_tile(Ks, qkv, k0, g, 1.0f, [&](int t) { return g.k(t); });
    load_tile(Vs, qkv, k0, g, 1.0f, [&](int t) { return g.v(t); });
    __syncthreads();
    #pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp * kRowsPerWarp + i, t = q0 + r;
      if (t >= g.T || k0 > t || k0 + kTile <= first[i]) continue;  // warp-uniform
      const bool valid = k0 + lane <= t && k0 + lane >= first[i];
      const float s = valid ? dot_rows(Qs + r * g.ld, Ks + lane * g.ld, g.hs) : -INFINITY;
      const float m_new = fmaxf(m[i], warp_max(s));
      const float p = valid ? expf(s - m_new) : 0.0f;
      const float corr = expf(m[i] - m_new);  // 0 on the first tile (m = -inf)
      l[i] = l[i] * corr + warp_sum(p);
      #pragma unroll
      for (int k = 0; k < KD; ++k) acc[i][k] *= corr;
      for (int j = 0; j < kTile; ++j) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
        #pragma unroll
        for (int k = 0; k < KD; ++k) {
          const int c = lane + 32 * k;
          if (c < g.hs) acc[i][k] += pj * Vs[j * g.ld + c];
        }
      }
      m[i] = m_new;
    }
  }
  #pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int t = q0 + warp * kRowsPerWarp + i;
    if (t >= g.T) continue;
    #pragma unroll
    for (int k = 0; k < KD; ++k) {
      const int c = lane + 32 * k;
      if (c < g.hs) out[g.o(t) + c] = from_float<T>(acc[i][k] / l[i]);
    }
    if (lane == 0) lse[g.stat(t)] = m[i] + logf(l[i]);
  }
}

// D[b,h,t] = dout[t] . out[t] (= sum over keys of p * dp), one warp per row.
template <typename T>
__global__ void __launch_bounds__(32 * kWarps)
    attention_rowdot_kernel(float* D, const T* dout, const T* out, int B, int T_, int C, int NH) {
  const int NKV = NH;  // out and D do not involve the key/value heads
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= int64_t(B) * NH * T_) return;
  const int t = int(row % T_), bh = int(row / T_);
  const Geo g(T_, C, NH, NKV, bh);
  float s = 0;
  for (int c = lane; c < g.hs; c += 32) s += to_float(dout[g.o(t) + c]) * to_float(out[g.o(t) + c]);
  s = warp_sum(s);
  if (lane == 0) D[g.stat(t)] = s;
}

// dK, dV for one tile of 32 keys: loops over the query tiles at or after it.
template <typename T, int KD>
__global__ void __launch_bounds__(32 * kWarps, 1)
    attention_backward_dkdv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                               const float* D, int T_, int C, int NH, int NKV, float scale,
                                               const int32_t* pos) {
  // blockIdx.y = (b, key/value head); g is the group's first query head, gq each in turn
  const int group = NH / NKV;
  const Geo g(T_, C, NH, NKV, (blockIdx.y / NKV) * NH + (blockIdx.y % NKV) * group);
  const int k0 = blockIdx.x * kTile, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  extern __shared__ float sm[];
  float* Ks = sm;
  float* Vs = Ks + kTile * g.ld;
  float* Qs = Vs + kTile * g.ld;
  float* dOs = Qs + kTile * g.ld;
  float* Ls = dOs + kTile * g.ld;  // (kTile) lse of the query tile
  float* Ds = Ls + kTile;          // (kTile)
  int* Fs = reinterpret_cast<int*>(Ds + kTile);  // (kTile) each query's first key
  load_tile(Ks, qkv, k0, g, 1.0f, [&](int t) { return g.k(t); });
  load_tile(Vs, qkv, k0, g, 1.0f, [&](int t) { return g.v(t); });
  float dk[kRowsPerWarp][KD], dv[kRowsPerWarp][KD];
  #pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i)
    #pragma unroll
    for (int k = 0; k < KD; ++k) dk[i][k] = dv[i][k] = 0;
  for (int hq = 0; hq < group; ++hq)
  for (int q0 = k0; q0 < g.T; q0 += kTile) {
    if (doc_first(pos, g.b, g.T, q0) >= k0 + kTile) break;  // (block-uniform) these queries' documents start later
    const Geo gq(T_, C, NH, NKV, (blockIdx.y / NKV) * NH + (blockIdx.y % NKV) * group + hq);
    __syncthreads();
    load_tile(Qs, qkv, q0, gq, 1.0f, [&](int t) { return gq.q(t); });
    load_tile(dOs, dout, q0, gq, 1.0f, [&](int t) { return gq.o(t); });
    for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
      const int t = q0 + r;
      Ls[r] = t < g.T ? lse[gq.stat(t)] : 0.0f;
      Ds[r] = t < g.T ? D[gq.stat(t)] : 0.0f;
      Fs[r] = t < g.T ? doc_first(pos, g.b, g.T, t) : 0;
    }
    __syncthreads();
    const int t = q0 + lane;  // this lane's query
    #pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int j = warp * kRowsPerWarp + i, t2 = k0 + j;
      if (t2 >= g.T) continue;  // warp-uniform
      const bool valid = t < g.T && t >= t2 && t2 >= Fs[lane];
      float p = 0, ds = 0;
      if (valid) {
        p = expf(dot_rows(Qs + lane * g.ld, Ks + j * g.ld, g.hs) * scale - Ls[lane]);
        const float dp = dot_rows(dOs + lane * g.ld, Vs + j * g.ld, g.hs);
        ds = p * (dp - Ds[lane]) * scale;
      }
      for (int r = 0; r < kTile; ++r) {
        const float pr = __shfl_sync(0xffffffffu, p, r), dsr = __shfl_sync(0xffffffffu, ds, r);
        #pragma unroll
        for (int k = 0; k < KD; ++k) {
          const int c = lane + 32 * k;
          if (c < g.hs) {
            dv[i][k] += pr * dOs[r * g.ld + c];
            dk[i][k] += dsr * Qs[r * g.ld + c];
          }
        }
      }
    }
  }
  #pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int t2 = k0 + warp * kRowsPerWarp + i;
    if (t2 >= g.T) continue;
    #pragma unroll
    for (int k = 0; k < KD; ++k) {
      const int c = lane + 32 * k;
      if (c >= g.hs) continue;
      T* pk = dqkv + g.k(t2) + c;
      T* pv = dqkv + g.v(t2) + c;
      *pk = from_float<T>(dk[i][k]);
      *pv = from_float<T>(dv[i][k]);
    }
  }
}

// dQ for one tile of 32 queries: loops over the key tiles up to the diagonal.
template <typename T, int KD>
__global__ void __launch_bounds__(32 * kWarps)
    attention_backward_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D,
                                             int T_, int C, int NH, int NKV, float scale, const int32_t* pos) {
  const Geo g(T_, C, NH, NKV, blockIdx.y);
  const int q0 = blockIdx.x * kTile, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  extern __shared__ float sm[];
  float* Qs = sm;
  float* dOs = Qs + kTile * g.ld;
  float* Ks = dOs + kTile * g.ld;
  float* Vs = Ks + kTile * g.ld;
  load_tile(Qs, qkv, q0, g, 1.0f, [&](int t) { return g.q(t); });
  load_tile(dOs, dout, q0, g, 1.0f, [&](int t) { return g.o(t); });
  float dq[kRowsPerWarp][KD], L[kRowsPerWarp], Dr[kRowsPerWarp];
  int first[kRowsPerWarp];
  #pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int t = q0 + warp * kRowsPerWarp + i;
    first[i] = t < g.T ? doc_first(pos, g.b, g.T, t) : 0;
    L[i] = t < g.T ? lse[g.stat(t)] : 0.0f;
    Dr[i] = t < g.T ? D[g.stat(t)] : 0.0f;
    #pragma unroll
    for (int k = 0; k < KD; ++k) dq[i][k] = 0;
  }
  const int last_q = min(q0 + kTile, g.T) - 1;
  for (int k0 = doc_first(pos, g.b, g.T, q0) / kTile * kTile; k0 <= last_q; k0 += kTile) {
    __syncthreads();
    load_tile(Ks, qkv, k0, g, 1.0f, [&](int t) { return g.k(t); });
    load_tile(Vs, qkv, k0, g, 1.0f, [&](int t) { return g.v(t); });
    __syncthreads();
    #pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp * kRowsPerWarp + i, t = q0 + r;
      if (t >= g.T || k0 > t || k0 + kTile <= first[i]) continue;  // warp-uniform
      const int t2 = k0 + lane;
      float ds = 0;
      if (t2 <= t && t2 >= first[i]) {
        const float p = expf(dot_rows(Qs + r * g.ld, Ks + lane * g.ld, g.hs) * scale - L[i]);
        const float dp = dot_rows(dOs + r * g.ld, Vs + lane * g.ld, g.hs);
        ds = p * (dp - Dr[i]) * scale;
      }
      for (int j = 0; j < kTile; ++j) {
        const float dsj = __shfl_sync(0xffffffffu, ds, j);
        #pragma unroll
        for (int k = 0; k < KD; ++k) {
          const int c = lane + 32 * k;
          if (c < g.hs) dq[i][k] += dsj * Ks[j * g.ld + c];
        }
      }
    }
  }
  #pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int t = q0 + warp * kRowsPerWarp + i;
    if (t >= g.T) continue;
    #pragma unroll
    for (int k = 0; k < KD; ++k) {
      const int c = lane + 32 * k;
      if (c >= g.hs) continue;
      T* pq = dqkv + g.q(t) + c;
      *pq = from_float<T>(dq[i][k]);
    }
  }
}

// ---- Tensor-core forward (bf16 / fp16, head size a multiple of 16, <= 128): FlashAttention-2's
// forward with WMMA 16x16x16 tiles. A block of 4 warps takes 64 queries (16 per warp) and streams
// 64-key tiles of K and V through shared memory; each warp computes S = Q K^T for its 16 rows on
// tensor cores (fp32 accumulation), does the online softmax on S in shared memory (2 lanes per
// row), writes P in T and accumulates O += P V on tensor cores into an fp32 O tile in shared
// memory that the softmax step rescales. P is rounded to T before P V, as in FlashAttention.
constexpr int kTcRows = 64, kTcWarps = 4;

struct TcLayout {  // shared-memory carve-up; every piece 128-byte aligned, leading dims padded
  int ldq, lds, ldp, ldo;
  size_t q, k, v, s, p, o, total;
  __host__ __device__ static size_t up(size_t b) { return (b + 127) / 128 * 128; }
  __host__ __device__ explicit TcLayout(int hs) {
    ldq = hs + 8;         // T elements (a multiple of 8, as WMMA needs for 16-bit)
    lds = kTcRows + 4;    // floats (a multiple of 4)
    ldp = kTcRows + 8;    // T elements
    ldo = hs + 4;         // floats
    q = 0;
    k = q + up(size_t(kTcRows) * ldq * 2);
    v = k + up(size_t(kTcRows) * ldq * 2);
    s = v + up(size_t(kTcRows) * ldq * 2);
    p = s + up(size_t(kTcRows) * lds * 4);
    o = p + up(size_t(kTcRows) * ldp * 2);
    total = o + up(size_t(kTcRows) * ldo * 4);
  }
};

// tile (kTcRows, ld) in T <- rows [t0, t0 + kTcRows) of src at offsets off(t); zero past T.
template <typename T, typename Off>
__device__ void load_tile_raw(T* tile, int ld, const T* src, int t0, const Geo& g, Off off) {
  for (int idx = threadIdx.x; idx < kTcRows * g.hs; idx += blockDim.x) {
    const int r = idx / g.hs, c = idx % g.hs, t = t0 + r;
    tile[r * ld + c] = t < g.T ? src[off(t) + c] : from_float<T>(0.0f);
  }
}

template <typename T>
__global__ void __launch_bounds__(32 * kTcWarps)
    attention_forward_tc_kernel(T* out, float* lse, const T* qkv, int T_, int C, int NH, int NKV, float scale,
                                const int32_t* pos) {
  using namespace nvcuda;
  const Geo g(T_, C, NH, NKV, blockIdx.y);
  const TcLayout L(g.hs);
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem + L.q);
  T* Ks = reinterpret_cast<T*>(smem + L.k);
  T* Vs = reinterpret_cast<T*>(smem + L.v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* Ss = reinterpret_cast<float*>(smem + L.s) + warp * 16 * L.lds;  // this warp's 16 rows
  T* Ps = reinterpret_cast<T*>(smem + L.p) + warp * 16 * L.ldp;
  float* Os = reinterpret_cast<float*>(smem + L.o) + warp * 16 * L.ldo;
  const int q0 = blockIdx.x * kTcRows, hs = g.hs;
  load_tile_raw(Qs, L.ldq, qkv, q0, g, [&](int t) { return g.q(t); });
  for (int idx = lane; idx < 16 * hs; idx += 32) Os[(idx / hs) * L.ldo + idx % hs] = 0.0f;
  // softmax bookkeeping: lane owns row r = lane / 2 of the warp's 16, columns half * 32 ..
  const int r = lane / 2, half = lane % 2, t = q0 + warp * 16 + r;
  const int first = t < g.T ? doc_first(pos, g.b, g.T, t) : 0;  // row t's first key
  float m = -INFINITY, l = 0.0f;
  const int last_q = min(q0 + kTcRows, g.T) - 1;
  for (int k0 = doc_first(pos, g.b, g.T, q0) / kTcRows * kTcRows; k0 <= last_q; k0 += kTcRows) {
    __syncthreads();  // every warp is done with the previous K/V tile
    load_tile_raw(Ks, L.ldq, qkv, k0, g, [&](int t) { return g.k(t); });
    load_tile_raw(Vs, L.ldq, qkv, k0, g, [&](int t) { return g.v(t); });
    __syncthreads();
    // S (16 x 64) = Q_w (16 x hs) K^T (hs x 64)
    for (int nb = 0; nb < kTcRows / 16; ++nb) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kk = 0; kk < hs; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
        wmma::load_matrix_sync(a, Qs + (warp * 16) * L.ldq + kk, L.ldq);
        wmma::load_matrix_sync(b, Ks + (nb * 16) * L.ldq + kk, L.ldq);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(Ss + nb * 16, acc, L.lds, wmma::mem_row_major);
    }
    __syncwarp();
    // online softmax over this tile's 64 keys for row r (two lanes, 32 keys each)
    float mx = -INFINITY;
    for (int j = half * 32; j < half * 32 + 32; ++j) {
      const float sc = k0 + j <= t && k0 + j >= first ? Ss[r * L.lds + j] * scale : -INFINITY;
      Ss[r * L.lds + j] = sc;
      mx = fmaxf(mx, sc);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);  // -inf while row t's document has not begun (packed documents)
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // then every p and the correction are 0, not NaN
    float sum = 0;
    for (int j = half * 32; j < half * 32 + 32; ++j) {
      const float pj = expf(Ss[r * L.lds + j] - base);
      Ps[r * L.ldp + j] = from_float<T>(pj);
      sum += pj;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    const float corr = expf(m - base);
    l = l * corr + sum;
    m = m_new;
    for (int c = half; c < hs; c += 2) Os[r * L.ldo + c] *= corr;
    __syncwarp();
    // O_w (16 x hs) += P (16 x 64) V (64 x hs)
    for (int nb = 0; nb < hs / 16; ++nb) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, Os + nb * 16, L.ldo, wmma::mem_row_major);
      for (int kk = 0; kk < kTcRows; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
        wmma::load_matrix_sync(a, Ps + kk, L.ldp);
        wmma::load_matrix_sync(b, Vs + kk * L.ldq + nb * 16, L.ldq);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(Os + nb * 16, acc, L.ldo, wmma::mem_row_major);
    }
    __syncwarp();
  }
  if (t < g.T) {
    for (int c = half; c < hs; c += 2) out[g.o(t) + c] = from_float<T>(Os[r * L.ldo + c] / l);
    if (half == 0) lse[g.stat(t)] = m + logf(l);
  }
}

// ---- Tensor-core backward (bf16 / fp16): the SIMT backward's two-kernel split with WMMA tiles.
// Each warp owns 16 rows (keys in the dK/dV kernel, queries in the dQ kernel) against a 64-wide
// tile of the other side: S and dP come from tensor-core products into fp32 shared tiles, the
// probabilities and dS = P (dP - D) scale are formed in fp32 and rounded to T (as FlashAttention
// does), and dK, dV or dQ accumulate in fp32 shared tiles through tensor-core products.
struct TcBwdLayout {
  int ldq, lds, ldp, ldo;
  size_t a, b, c, d, l, dv, fq, s, dp, p, ds, acc0, acc1, total;
  __host__ __device__ explicit TcBwdLayout(int hs) {
    ldq = hs + 8;
    lds = kTcRows + 4;
    ldp = kTcRows + 8;
    ldo = hs + 4;
    const size_t tile = TcLayout::up(size_t(kTcRows) * ldq * 2);
    const size_t wf = TcLayout::up(size_t(kTcWarps) * 16 * lds * 4);  // per-warp fp32 16x64 tiles
    const size_t wt = TcLayout::up(size_t(kTcWarps) * 16 * ldp * 2);  // per-warp T 16x64 tiles
    const size_t wo = TcLayout::up(size_t(kTcWarps) * 16 * ldo * 4);  // per-warp fp32 16 x hs
    a = 0;            // four (64, hs) T tiles: the kernel's own rows and the streamed ones
    b = a + tile;
    c = b + tile;
    d = c + tile;
    l = d + tile;     // (64) lse, (64) D and (64) first keys of the query tile
    dv = l + 256;
    fq = dv + 256;
    s = fq + 256;
    dp = s + wf;
    p = dp + wf;
    ds = p + wt;
    acc0 = ds + wt;
    acc1 = acc0 + wo;
    total = acc1 + wo;
  }
};

// The pieces of TcBwdLayout as pointers; S, dP, P, dS and acc are this warp's 16 rows.
template <typename T>
struct TcBwdShared {
  T* tile[4];           // (64, ldq) each
  float *lse, *D;       // (64) of the query tile
  int* first;           // (64) each query's first key
  float *S, *dP;        // (16, lds)
  T *P, *dS;            // (16, ldp)
  float* acc[2];        // (16, ldo)
  __device__ TcBwdShared(unsigned char* smem, const TcBwdLayout& L, int warp) {
    const size_t tiles[4] = {L.a, L.b, L.c, L.d};
    for (int i = 0; i < 4; ++i) tile[i] = reinterpret_cast<T*>(smem + tiles[i]);
    lse = reinterpret_cast<float*>(smem + L.l);
    D = reinterpret_cast<float*>(smem + L.dv);
    first = reinterpret_cast<int*>(smem + L.fq);
    S = reinterpret_cast<float*>(smem + L.s) + warp * 16 * L.lds;
    dP = reinterpret_cast<float*>(smem + L.dp) + warp * 16 * L.lds;
    P = reinterpret_cast<T*>(smem + L.p) + warp * 16 * L.ldp;
    dS = reinterpret_cast<T*>(smem + L.ds) + warp * 16 * L.ldp;
    acc[0] = reinterpret_cast<float*>(smem + L.acc0) + warp * 16 * L.ldo;
    acc[1] = reinterpret_cast<float*>(smem + L.acc1) + warp * 16 * L.ldo;
  }
};

// S_w (16 x 64) = A_w (16 x hs, rows of `rows`) times the transpose of B (64 x hs), into fp32.
template <typename T>
__device__ void tc_rows_times_cols(float* S, int lds, const T* rows, const T* cols, int ldq, int hs) {
  using namespace nvcuda;
  for (int nb = 0; nb < kTcRows / 16; ++nb) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < hs; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
      wmma::load_matrix_sync(fa, rows + kk, ldq);
      wmma::load_matrix_sync(fb, cols + (nb * 16) * ldq + kk, ldq);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(S + nb * 16, acc, lds, wmma::mem_row_major);
  }
}

// Acc (16 x hs, fp32) += P (16 x 64, T) times M (64 x hs, T).
template <typename T>
__device__ void tc_accumulate(float* Acc, int ldo, const T* P, int ldp, const T* M, int ldq, int hs) {
  using namespace nvcuda;
  for (int nb = 0; nb < hs / 16; ++nb) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, Acc + nb * 16, ldo, wmma::mem_row_major);
    for (int kk = 0; kk < kTcRows; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
      wmma::load_matrix_sync(fa, P + kk, ldp);
      wmma::load_matrix_sync(fb, M + kk * ldq + nb * 16, ldq);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(Acc + nb * 16, acc, ldo, wmma::mem_row_major);
  }
}

template <typename T>
__device__ void tc_load_stats(float* Ls, float* Ds, int* Fs, const float* lse, const float* D, const int32_t* pos,
                              int t0, const Geo& g) {
  for (int r = threadIdx.x; r < kTcRows; r += blockDim.x) {
    const int t = t0 + r;
    Ls[r] = t < g.T ? lse[g.stat(t)] : 0.0f;
    Ds[r] = t < g.T ? D[g.stat(t)] : 0.0f;
    Fs[r] = t < g.T ? doc_first(pos, g.b, g.T, t) : 0;
  }
}

// dK, dV for 64 keys (16 per warp) over the query tiles at or after them.
template <typename T>
__global__ void __launch_bounds__(32 * kTcWarps, 1)
    attention_backward_dkdv_tc_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                                  const float* D, int T_, int C, int NH, int NKV, float scale,
                                                  const int32_t* pos) {
  // blockIdx.y = (b, key/value head); g is the group's first query head, gq each in turn
  const int group = NH / NKV;
  const Geo g(T_, C, NH, NKV, (blockIdx.y / NKV) * NH + (blockIdx.y % NKV) * group);
  const TcBwdLayout L(g.hs);
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, hs = g.hs;
  const TcBwdShared<T> sh(smem, L, warp);
  T *Ks = sh.tile[0], *Vs = sh.tile[1], *Qs = sh.tile[2], *dOs = sh.tile[3];
  float *Ls = sh.lse, *Dq = sh.D;
  float *S = sh.S, *dP = sh.dP;  // transposed here: (16 keys, 64 queries)
  T *P = sh.P, *dS = sh.dS;
  float *dK = sh.acc[0], *dV = sh.acc[1];
  const int k0 = blockIdx.x * kTcRows;
  load_tile_raw(Ks, L.ldq, qkv, k0, g, [&](int t) { return g.k(t); });
  load_tile_raw(Vs, L.ldq, qkv, k0, g, [&](int t) { return g.v(t); });
  for (int idx = lane; idx < 16 * hs; idx += 32) dK[(idx / hs) * L.ldo + idx % hs] = dV[(idx / hs) * L.ldo + idx % hs] = 0;
  const int r = lane / 2, half = lane % 2, key = k0 + warp * 16 + r;  // lane's row for the elementwise step
  for (int hq = 0; hq < group; ++hq)
  for (int q0 = k0; q0 < g.T; q0 += kTcRows) {
    if (doc_first(pos, g.b, g.T, q0) >= k0 + kTcRows) break;  // (block-uniform) these queries' documents start later
    const Geo gq(T_, C, NH, NKV, (blockIdx.y / NKV) * NH + (blockIdx.y % NKV) * group + hq);
    __syncthreads();
    load_tile_raw(Qs, L.ldq, qkv, q0, gq, [&](int t) { return gq.q(t); });
    load_tile_raw(dOs, L.ldq, dout, q0, gq, [&](int t) { return gq.o(t); });
    tc_load_stats<T>(Ls, Dq, sh.first, lse, D, pos, q0, gq);
    __syncthreads();
    tc_rows_times_cols(S, L.lds, Ks + warp * 16 * L.ldq, Qs, L.ldq, hs);   // K_w Q^T
    tc_rows_times_cols(dP, L.lds, Vs + warp * 16 * L.ldq, dOs, L.ldq, hs);  // V_w dO^T
    __syncwarp();
    for (int i = half * 32; i < half * 32 + 32; ++i) {
      const int t = q0 + i;
      const bool valid = key < g.T && t < g.T && t >= key && key >= sh.first[i];
      const float p = valid ? expf(S[r * L.lds + i] * scale - Ls[i]) : 0.0f;
      P[r * L.ldp + i] = from_float<T>(p);
      dS[r * L.ldp + i] = from_float<T>(p * (dP[r * L.lds + i] - Dq[i]) * scale);
    }
    __syncwarp();
    tc_accumulate(dV, L.ldo, P, L.ldp, dOs, L.ldq, hs);  // dV_w += P^T_w dO
    tc_accumulate(dK, L.ldo, dS, L.ldp, Qs, L.ldq, hs);  // dK_w += dS^T_w Q
    __syncwarp();
  }
  if (key < g.T)
    for (int c = half; c < hs; c += 2) {
      T* pk = dqkv + g.k(key) + c;
      T* pv = dqkv + g.v(key) + c;
      *pk = from_float<T>(dK[r * L.ldo + c]);
      *pv = from_float<T>(dV[r * L.ldo + c]);
    }
}

// dQ for 64 queries (16 per warp) over the key tiles up to the diagonal.
template <typename T>
__global__ void __launch_bounds__(32 * kTcWarps)
    attention_backward_dq_tc_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* D,
                                                int T_, int C, int NH, int NKV, float scale, const int32_t* pos) {
  const Geo g(T_, C, NH, NKV, blockIdx.y);
  const TcBwdLayout L(g.hs);
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, hs = g.hs;
  const TcBwdShared<T> sh(smem, L, warp);
  T *Qs = sh.tile[0], *dOs = sh.tile[1], *Ks = sh.tile[2], *Vs = sh.tile[3];
  float *Ls = sh.lse, *Dq = sh.D, *S = sh.S, *dP = sh.dP, *dQ = sh.acc[0];
  T* dS = sh.dS;
  const int q0 = blockIdx.x * kTcRows;
  load_tile_raw(Qs, L.ldq, qkv, q0, g, [&](int t) { return g.q(t); });
  load_tile_raw(dOs, L.ldq, dout, q0, g, [&](int t) { return g.o(t); });
  tc_load_stats<T>(Ls, Dq, sh.first, lse, D, pos, q0, g);
  for (int idx = lane; idx < 16 * hs; idx += 32) dQ[(idx / hs) * L.ldo + idx % hs] = 0;
  const int r = lane / 2, half = lane % 2, row = warp * 16 + r, t = q0 + row;
  const int last_q = min(q0 + kTcRows, g.T) - 1;
  for (int k0 = doc_first(pos, g.b, g.T, q0) / kTcRows * kTcRows; k0 <= last_q; k0 += kTcRows) {
    __syncthreads();
    load_tile_raw(Ks, L.ldq, qkv, k0, g, [&](int t) { return g.k(t); });
    load_tile_raw(Vs, L.ldq, qkv, k0, g, [&](int t) { return g.v(t); });
    __syncthreads();
    tc_rows_times_cols(S, L.lds, Qs + warp * 16 * L.ldq, Ks, L.ldq, hs);    // Q_w K^T
    tc_rows_times_cols(dP, L.lds, dOs + warp * 16 * L.ldq, Vs, L.ldq, hs);  // dO_w V^T
    __syncwarp();
    for (int j = half * 32; j < half * 32 + 32; ++j) {
      const bool valid = t < g.T && k0 + j <= t && k0 + j >= sh.first[row];
      const float p = valid ? expf(S[r * L.lds + j] * scale - Ls[row]) : 0.0f;
      dS[r * L.ldp + j] = from_float<T>(p * (dP[r * L.lds + j] - Dq[row]) * scale);
    }
    __syncwarp();
    tc_accumulate(dQ, L.ldo, dS, L.ldp, Ks, L.ldq, hs);  // dQ_w += dS_w K
    __syncwarp();
  }
  if (t < g.T)
    for (int c = half; c < hs; c += 2) {
      T* pq = dqkv + g.q(t) + c;
      *pq = from_float<T>(dQ[r * L.ldo + c]);
    }
}

// Largest dynamic shared memory a block may opt in to on the current device.
inline size_t smem_optin_limit() {
  static const size_t limit = [] {
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    return size_t(v);
  }();
  return limit;
}

const std::string& attention_choice() { return attention_kernels_choice(); }

bool use_fa2() { return attention_choice() != "wmma" && attention_choice() != "simt"; }

// A shape the FlashAttention-2 kernels are for (head size 64 or 128) that they refuse at run time
// (a buffer not aligned for their 16-byte copies) is never a silent fallback: said once per pass,
// and with ZTRAIN_ATTENTION=fa2 (tests, the GPU check) an error.
bool fa2_refused(bool ran, int hs, bool backward, int B, int T_, int NH) {
  if (ran || (hs != 64 && hs != 128) || B * T_ <= 0) return ran;
  const char* pass = backward ? "attention_backward" : "attention_forward";
  if (attention_choice() == "fa2")
    fail(__FILE__, __LINE__, pass, "the FlashAttention-2 kernels refused this call (a buffer not 16-byte aligned)");
  static bool said[2] = {false, false};
  bool& once = said[backward];
  if (!once)
    std::fprintf(stderr, "attention: %s for B %d T %d heads %d of size %d: the FlashAttention-2 kernels refused it (a "
                 "buffer not 16-byte aligned); the WMMA kernels run instead\n", pass, B, T_, NH, hs);
  once = true;
  return false;
}

template <typename T>
bool forward_fa2(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int NKV, const int32_t* pos,
                 cudaStream_t s) {
  if (!use_fa2()) return false;
  return fa2_refused(attention_forward_fa2(out, lse, qkv, B, T_, C, NH, NKV, pos, s), C / NH, /*backward=*/false, B,
                     T_, NH);
}
template <typename T>
bool backward_fa2(T* dqkv, float* dq_acc, const T* dout, const T* qkv, const float* lse, const float* D, int B, int T_,
                  int C, int NH, int NKV, const int32_t* pos, cudaStream_t s) {
  if (!use_fa2()) return false;
  return fa2_refused(attention_backward_fa2(dqkv, dq_acc, dout, qkv, lse, D, B, T_, C, NH, NKV, pos, s), C / NH,
                     /*backward=*/true, B, T_, NH);
}

// The tensor-core path applies to 16-bit types and head sizes that are multiples of 16.
template <typename T>
bool use_tensor_cores(int hs) {
  return sizeof(T) == 2 && hs % 16 == 0 && hs <= kMaxHead && attention_choice() != "simt";
}

// Runs fn(std::integral_constant<int, KD>) for the head size's KD.
template <typename Fn>
void with_kd(int hs, const char* what, Fn fn) {
  if (hs > kMaxHead) fail(__FILE__, __LINE__, what, "head size above 128 is not supported");
  switch ((hs + 31) / 32) {
    case 1: fn(std::integral_constant<int, 1>{}); break;
    case 2: fn(std::integral_constant<int, 2>{}); break;
    case 3: fn(std::integral_constant<int, 3>{}); break;
    default: fn(std::integral_constant<int, 4>{}); break;
  }
}

// Dynamic shared memory above the 48 KiB default needs an opt-in per kernel.
template <typename K>
void allow_smem(K kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}
}  // namespace

template <typename T>
void attention_forward_own(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int NKV, const int32_t* pos,
                           cudaStream_t s) {
  if (B * T_ <= 0) return;
  const int hs = C / NH;
  if constexpr (sizeof(T) == 2) {
    if (forward_fa2(out, lse, qkv, B, T_, C, NH, NKV, pos, s)) return;
    const TcLayout L(hs);
    if (use_tensor_cores<T>(hs) && L.total <= smem_optin_limit()) {
      auto kernel = attention_forward_tc_kernel<T>;
      allow_smem(kernel, L.total);
      launch(kernel, dim3(blocks_for(T_, kTcRows), unsigned(B * NH)), 32 * kTcWarps, L.total, s, out, lse, qkv, T_, C,
             NH, NKV, 1.0f / std::sqrt(float(hs)), pos);
      ZT_CUDA_LAUNCH_CHECK();
      return;
    }
  }
  const dim3 grid(blocks_for(T_, kTile), unsigned(B * NH));
  const size_t smem = size_t(3) * kTile * (hs + 1) * sizeof(float);
  with_kd(hs, "attention_forward", [&](auto kd) {
    auto kernel = attention_forward_kernel<T, decltype(kd)::value>;
    allow_smem(kernel, smem);
    launch(kernel, grid, 32 * kWarps, smem, s, out, lse, qkv, T_, C, NH, NKV, 1.0f / std::sqrt(float(hs)), pos);
  });
  ZT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void attention_backward_own(T* dqkv, const T* dout, const T* out, const T* qkv, const float* lse, int B, int T_, int C,
                            int NH, int NKV, const int32_t* pos, float* scratch, bool deterministic, cudaStream_t s) {
  if (B * T_ <= 0) return;
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(float(hs));
  float* D = scratch;  // (B,NH,T), then the (B,T,C) dQ accumulator where the 5-unit backward applies
  float* dq_acc =
      fa2::backward_accumulates_dq(hs, sizeof(T), deterministic) ? D + fa2::dq_accumulator_offset_floats(B, T_, NH) : nullptr;
  launch(attention_rowdot_kernel<T>, blocks_for(int64_t(B) * NH * T_, kWarps), 32 * kWarps, 0, s, D, dout, out, B, T_,
         C, NH);
  ZT_CUDA_LAUNCH_CHECK();
  if constexpr (sizeof(T) == 2) {
    if (backward_fa2(dqkv, dq_acc, dout, qkv, lse, D, B, T_, C, NH, NKV, pos, s)) return;
    const TcBwdLayout L(hs);
    if (use_tensor_cores<T>(hs) && L.total <= smem_optin_limit()) {
      const dim3 tc_grid(blocks_for(T_, kTcRows), unsigned(B * NH)), kv_grid(tc_grid.x, unsigned(B * NKV));
      auto dkdv = attention_backward_dkdv_tc_kernel<T>;
      allow_smem(dkdv, L.total);
      launch(dkdv, kv_grid, 32 * kTcWarps, L.total, s, dqkv, dout, qkv, lse, D, T_, C, NH, NKV, scale, pos);
      ZT_CUDA_LAUNCH_CHECK();
      auto dq = attention_backward_dq_tc_kernel<T>;
      allow_smem(dq, L.total);
      launch(dq, tc_grid, 32 * kTcWarps, L.total, s, dqkv, dout, qkv, lse, D, T_, C, NH, NKV, scale, pos);
      ZT_CUDA_LAUNCH_CHECK();
      return;
    }
  }
  const dim3 grid(blocks_for(T_, kTile), unsigned(B * NH)), kv_grid(grid.x, unsigned(B * NKV));
  const size_t tiles = size_t(4) * kTile * (hs + 1) * sizeof(float);
  with_kd(hs, "attention_backward", [&](auto kd) {
    auto dkdv = attention_backward_dkdv_kernel<T, decltype(kd)::value>;
    const size_t dkdv_smem = tiles + 3 * kTile * sizeof(float);  // + lse, D and first keys of the query tile
    allow_smem(dkdv, dkdv_smem);
    launch(dkdv, kv_grid, 32 * kWarps, dkdv_smem, s, dqkv, dout, qkv, lse, D, T_, C, NH, NKV, scale, pos);
    ZT_CUDA_LAUNCH_CHECK();
    auto dq = attention_backward_dq_kernel<T, decltype(kd)::value>;
    allow_smem(dq, tiles);
    launch(dq, grid, 32 * kWarps, tiles, s, dqkv, dout, qkv, lse, D, T_, C, NH, NKV, scale, pos);
  });
  ZT_CUDA_LAUNCH_CHECK();
}

#define ZT_INSTANTIATE(T)                                                                             \
  template void attention_forward_own<T>(T*, float*, const T*, int, int, int, int, int, const int32_t*,  \
                                         cudaStream_t);                                                   \
  template void attention_backward_own<T>(T*, const T*, const T*, const T*, const float*, int, int, int, \
                                          int, int, const int32_t*, float*, bool, cudaStream_t);
ZT_INSTANTIATE(float)
ZT_INSTANTIATE(__nv_bfloat16)
ZT_INSTANTIATE(__half)
#undef ZT_INSTANTIATE

}  // namespace zt::cuda
