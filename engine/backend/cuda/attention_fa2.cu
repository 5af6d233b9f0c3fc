// Causal attention forward in FlashAttention-2's structure, on mma.sync tensor-core instructions
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
// P is rounded to T before P V, as in FlashAttention. Written for a first GPU run: it is opt-in
// (ZTRAIN_ATTENTION=fa2) until the GPU check's comparison with the CPU backend has passed.
//
// mma.sync.m16n8k16 fragments (PTX ISA, 16-bit A/B, fp32 C), g = lane / 4, q = lane % 4:
//   A (16 x 16, row-major): a0 = (g, 2q..2q+1), a1 = (g + 8, 2q..), a2 = (g, 2q + 8..), a3 = (g + 8, 2q + 8..)
//   B (16 x 8, k x n):      b0 = (k = 2q..2q+1, n = g), b1 = (k = 2q + 8.., n = g)
//   C (16 x 8):             c0, c1 = (g, 2q..2q+1), c2, c3 = (g + 8, 2q..2q+1)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {
constexpr int kRows = 64, kWarps = 4, kKeys = 64;

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

// d += a b on tensor cores (16 x 8 x 16, fp32 accumulation)
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// 16 bytes global -> shared without passing through registers; `valid` false: zeros
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Where query head h of sequence b lives in qkv (B,T,(NH + 2 NKV) hs), out (B,T,C), lse (B,NH,T)
struct Heads {
  int64_t row, q, k, v, o, stat;  // row: elements per (b, t) row of qkv; the rest: offsets of t = 0
  __device__ Heads(int T_, int C, int NH, int NKV, int hs, int bh) {
    const int b = bh / NH, h = bh % NH, kvh = h / (NH / NKV);
    row = int64_t(NH + 2 * NKV) * hs;
    q = int64_t(b) * T_ * row + int64_t(h) * hs;
    k = int64_t(b) * T_ * row + C + int64_t(kvh) * hs;
    v = k + int64_t(NKV) * hs;
    o = int64_t(b) * T_ * C + int64_t(h) * hs;
    stat = (int64_t(b) * NH + h) * T_;
  }
};

// rows [t0, t0 + 64) of K and V (zeros past T) into shared tiles of (64, HS + 8), 16 bytes a copy
template <typename T, int HS>
__device__ void load_kv(T* Ks, T* Vs, const T* qkv, const Heads& H, int t0, int T_) {
  constexpr int kLd = HS + 8, kChunks = HS / 8;  // 8 elements per 16-byte copy
  for (int idx = threadIdx.x; idx < kKeys * kChunks; idx += blockDim.x) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8, t = t0 + r;
    const bool ok = t < T_;
    const int64_t at = int64_t(ok ? t : 0) * H.row + c;
    cp_async16(Ks + r * kLd + c, qkv + H.k + at, ok);
    cp_async16(Vs + r * kLd + c, qkv + H.v + at, ok);
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
  for (int kk = 0; kk < HS / 16; ++kk)
    for (int i = 0; i < 4; ++i) {
      const int r = i % 2 ? row1 : row0, c = kk * 16 + 2 * q + (i / 2) * 8;
      qa[kk][i] = r < T_ ? *reinterpret_cast<const uint32_t*>(qkv + H.q + int64_t(r) * H.row + c) : 0u;
    }
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
    for (int nb = 0; nb < kKeys / 8; ++nb)
      for (int kk = 0; kk < HS / 16; ++kk) {
        const T* kr = Ks + (nb * 8 + g) * kLd + kk * 16 + 2 * q;
        mma16816<T>(s[nb], qa[kk], *reinterpret_cast<const uint32_t*>(kr), *reinterpret_cast<const uint32_t*>(kr + 8));
      }
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
      const uint32_t pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                              pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const T* vr = Vs + (kk * 16 + 2 * q) * kLd + g;  // V (keys x dims): B's k = key, n = dim
      for (int dn = 0; dn < HS / 8; ++dn) {
        const T* v = vr + dn * 8;
        mma16816<T>(o[dn], pa, pack2<T>(v[0], v[kLd]), pack2<T>(v[8 * kLd], v[9 * kLd]));
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

template <typename T, int HS>
void launch(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int NKV, cudaStream_t s) {
  const size_t smem = size_t(2) * 2 * kKeys * (HS + 8) * sizeof(T);
  auto kernel = attention_forward_fa2_kernel<T, HS>;
  if (smem > 48 * 1024)
    ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(unsigned((T_ + kRows - 1) / kRows), unsigned(B * NH));
  kernel<<<grid, 32 * kWarps, smem, s>>>(out, lse, qkv, T_, C, NH, NKV, 1.0f / std::sqrt(float(HS)));
  ZT_CUDA_LAUNCH_CHECK();
}
}  // namespace

template <typename T>
bool attention_forward_fa2(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int NKV, cudaStream_t s) {
  const int hs = C / NH;
  // 16-byte copies need 16-byte aligned rows: the base, and every row and head offset
  const bool aligned = reinterpret_cast<uintptr_t>(qkv) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 4 == 0;
  if (!aligned || (hs != 64 && hs != 128) || B * T_ <= 0) return false;
  if (hs == 64) launch<T, 64>(out, lse, qkv, B, T_, C, NH, NKV, s);
  else launch<T, 128>(out, lse, qkv, B, T_, C, NH, NKV, s);
  return true;
}

template bool attention_forward_fa2<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*, int, int, int, int,
                                                   int, cudaStream_t);
template bool attention_forward_fa2<__half>(__half*, float*, const __half*, int, int, int, int, int, cudaStream_t);

}  // namespace zt::cuda
