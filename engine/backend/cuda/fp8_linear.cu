// FP8 linear layers (engine/backend/fp8_recipe.h) on cuBLASLt's FP8 GEMMs. Each operand's amax by
// a two-pass reduction (fixed blocks, then one: no atomics, the same every run), its scale and
// inverse on the device, its FP8 copy (transposed where Hopper's TN-only FP8 GEMM needs the other
// operand order), then the GEMM with the inverse scales as A's and B's tensor-wide scales:
//   forward  out (N,OC)  = x (N,C) w^T:        A = w (E4M3, k = C),   B = x (E4M3)
//   dgrad    dinp (N,C)  = dy (N,OC) w:        A = w^T (E4M3, k = OC), B = dy (E5M2)
//   wgrad    dw (OC,C)  += dy^T (OC,N) x:      A = x^T (E4M3, k = N),  B = dy^T (E5M2), fp32
// The bias gradient: column sums of the unquantized dy. Conversions: the hardware's
// cvt.rn.satfinite on a GPU, engine/core/fp8.h's identical arithmetic on the emulated device. A
// weight cast once per update (fp8_weight_copy) replaces w's cast: the forward reads its bytes, the
// input gradient their transpose.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <type_traits>
#ifndef ZT_CUDA_EMULATED
#include <cuda_fp8.h>
#endif

#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/launch.cuh"
#include "engine/backend/cuda/matmul.cuh"
#include "engine/backend/cuda/ops.cuh"
#include "engine/backend/fp8_recipe.h"

namespace zt::cuda {

namespace {

constexpr int kBlocks = 256, kThreads = 256;

__device__ __forceinline__ uint8_t to_fp8(float v, fp8::Format f) {
#ifdef ZT_CUDA_EMULATED
  return fp8::from_float(v, f);
#else
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, f == fp8::Format::E4M3 ? __NV_E4M3 : __NV_E5M2);
#endif
}

// partial[block] = max |x| over the block's grid-stride share (gridDim.x <= kBlocks blocks)
template <typename T>
__global__ void __launch_bounds__(kThreads) amax_blocks_kernel(float* partial, const T* x, int64_t n) {
  __shared__ float warp_max[kThreads / 32];
  float m = 0.0f;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads)
    m = fmaxf(m, fabsf(to_float(x[i])));
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float b = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) b = fmaxf(b, warp_max[w]);
    partial[blockIdx.x] = b;
  }
}

// The largest of the `blocks` block maxima, in every lane of the one warp that reads them
__device__ __forceinline__ float max_of_blocks(const float* partial, int blocks) {
  float m = 0.0f;
  for (int i = threadIdx.x; i < blocks; i += 32) m = fmaxf(m, partial[i]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  return m;
}

// scale[0] = the format's largest value / amax (fp8_recipe::scale_for) over the `blocks` block
// maxima, scale[1] = 1 / scale[0]
__global__ void __launch_bounds__(32) scale_kernel(float* scale, const float* partial, int blocks, float max_finite) {
  const float m = max_of_blocks(partial, blocks);
  if (threadIdx.x == 0) {
    scale[0] = max_finite / fmaxf(m, 1e-12f);
    scale[1] = 1.0f / scale[0];
  }
}

// amax[0] = max(amax[0], the `blocks` block maxima): a piece of a weight's amax (fp8_amax)
__global__ void __launch_bounds__(32) max_into_kernel(float* amax, const float* partial, int blocks) {
  const float m = max_of_blocks(partial, blocks);
  if (threadIdx.x == 0) amax[0] = fmaxf(amax[0], m);
}

// x's element as FP8: scaled and rounded, or (T = uint8_t: an FP8 copy already, fp8_weight_copy's)
// as it is
template <typename T>
__device__ __forceinline__ uint8_t encode(T v, float s, fp8::Format f) {
  if constexpr (std::is_same_v<T, uint8_t>) return v;
  else return to_fp8(to_float(v) * s, f);
}

// q (rows, cols) = fp8(x * scale) and/or its transpose qt (cols, rows) (T = uint8_t: x's bytes
// transposed, no scale), through a 32 x 32 tile in
// shared memory so that the reads of x and the byte writes of both copies are each a warp's 32
// consecutive addresses. Blocks of 256 threads (8 warps, a warp per tile row at a time), grid
// (rows / 32, cols / 32) rounded up (rows on x: any number of tokens; cols on y: up to 65535 x 32,
// wider than any layer).
constexpr int kTile = 32, kTileRows = 8;
template <typename T>
__global__ void __launch_bounds__(kTile * kTileRows) quantize_kernel(uint8_t* q, uint8_t* qt, const T* x, int64_t rows,
                                                                     int64_t cols, const float* scale, fp8::Format f) {
  __shared__ uint8_t tile[kTile][kTile + 1];
  const float s = std::is_same_v<T, uint8_t> ? 1.0f : scale[0];
  const int lane = int(threadIdx.x) % kTile, warp = int(threadIdx.x) / kTile;
  const int64_t r0 = int64_t(blockIdx.x) * kTile, c0 = int64_t(blockIdx.y) * kTile;
  for (int k = warp; k < kTile; k += kTileRows) {
    const int64_t r = r0 + k, c = c0 + lane;
    if (r < rows && c < cols) {
      const uint8_t v = encode(x[r * cols + c], s, f);
      tile[k][lane] = v;
      if (q) q[r * cols + c] = v;
    }
  }
  if (!qt) return;
  __syncthreads();
  for (int k = warp; k < kTile; k += kTileRows) {
    const int64_t c = c0 + k, r = r0 + lane;
    if (r < rows && c < cols) qt[c * rows + r] = tile[lane][k];
  }
}

// One operand: its scales at `scales` (2 floats) from the block maxima at `partial`, then its FP8
// copy and/or transposed copy of the (rows, cols) row-major x.
template <typename T>
void quantize(uint8_t* q, uint8_t* qt, float* scales, float* partial, const T* x, int64_t rows, int64_t cols,
              fp8::Format f, cudaStream_t s) {
  const int blocks = blocks_for_at_most(rows * cols, kThreads, kBlocks);
  launch(amax_blocks_kernel<T>, blocks, kThreads, 0, s, partial, x, rows * cols);
  ZT_CUDA_LAUNCH_CHECK();
  launch(scale_kernel, 1, 32, 0, s, scales, static_cast<const float*>(partial), blocks, fp8::max_finite(f));
  ZT_CUDA_LAUNCH_CHECK();
  const dim3 grid(unsigned((rows + kTile - 1) / kTile), unsigned((cols + kTile - 1) / kTile));
  launch(quantize_kernel<T>, grid, kTile * kTileRows, 0, s, q, qt, x, rows, cols, static_cast<const float*>(scales), f);
  ZT_CUDA_LAUNCH_CHECK();
}

// q (n) = fp8(x * scale[0]), element by element (a weight's shard: any length)
template <typename T>
__global__ void __launch_bounds__(kThreads) cast_kernel(uint8_t* q, const T* x, int64_t n, const float* scale,
                                                         fp8::Format f) {
  const float sc = scale[0];
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads)
    q[i] = to_fp8(to_float(x[i]) * sc, f);
}

// qt (cols, rows) = the FP8 bytes q (rows, cols) transposed
void transpose_fp8(uint8_t* qt, const uint8_t* q, int64_t rows, int64_t cols, cudaStream_t s) {
  const dim3 grid(unsigned((rows + kTile - 1) / kTile), unsigned((cols + kTile - 1) / kTile));
  launch(quantize_kernel<uint8_t>, grid, kTile * kTileRows, 0, s, static_cast<uint8_t*>(nullptr), qt, q, rows, cols,
         static_cast<const float*>(nullptr), fp8_recipe::kForward);
  ZT_CUDA_LAUNCH_CHECK();
}

// A weight copy's parts (fp8_recipe::weight_copy_bytes): its scales, then its bytes
const float* copy_scales(const uint8_t* copy) { return reinterpret_cast<const float*>(copy); }
const uint8_t* copy_bytes(const uint8_t* copy) { return copy + fp8_recipe::kWeightScalesBytes; }

// The scratch's regions (fp8_recipe's layout): per operand 256 block maxima and 2 scales
struct Regions {
  char* at;
  float* partial(int operand) const { return reinterpret_cast<float*>(at) + operand * (kBlocks + 2); }
  float* scales(int operand) const { return partial(operand) + kBlocks; }
  uint8_t* bytes(int64_t offset) const { return reinterpret_cast<uint8_t*>(at) + fp8_recipe::kScalarsBytes + offset; }
};
static_assert(3 * (kBlocks + 2) * 4 <= fp8_recipe::kScalarsBytes);

template <typename T>
cudaDataType_t data_type() {
  return sizeof(T) == 4 ? CUDA_R_32F : std::is_same_v<T, __half> ? CUDA_R_16F : CUDA_R_16BF;
}
template <typename T>
DType dtype_of() {
  return sizeof(T) == 4 ? DType::F32 : std::is_same_v<T, __half> ? DType::F16 : DType::BF16;
}

// cuBLASLt without an FP8 algorithm for a product (an older library, an unusual alignment): the
// layer runs in the compute type instead, said once
void no_fp8_algorithm(const char* pass, int N, int C, int OC) {
  static bool said = false;
  if (!said)
    std::fprintf(stderr, "FP8: cuBLASLt has no FP8 algorithm for the %s of a (%d, %d) x (%d, %d) linear layer: it "
                 "runs in the compute type (said once)\n", pass, N, C, OC, C);
  said = true;
}

}  // namespace

template <typename T>
void fp8_weight_copy(uint8_t* copy, const T* w, int OC, int C, void* scratch, cudaStream_t s) {
  quantize(copy + fp8_recipe::kWeightScalesBytes, static_cast<uint8_t*>(nullptr), reinterpret_cast<float*>(copy),
           static_cast<float*>(scratch), w, OC, C, fp8_recipe::kForward, s);
}

template <typename T>
void fp8_amax(float* amax, const T* x, int64_t n, void* scratch, cudaStream_t s) {
  if (n <= 0) return;
  const int blocks = blocks_for_at_most(n, kThreads, kBlocks);
  launch(amax_blocks_kernel<T>, blocks, kThreads, 0, s, static_cast<float*>(scratch), x, n);
  ZT_CUDA_LAUNCH_CHECK();
  launch(max_into_kernel, 1, 32, 0, s, amax, static_cast<const float*>(scratch), blocks);
  ZT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void fp8_cast_with_amax(uint8_t* q, float* scales, const T* x, int64_t n, const float* amax, cudaStream_t s) {
  // the scales as fp8_weight_copy makes them from a whole weight's block maxima: here one, the amax
  launch(scale_kernel, 1, 32, 0, s, scales, amax, 1, fp8::max_finite(fp8_recipe::kForward));
  ZT_CUDA_LAUNCH_CHECK();
  if (n <= 0) return;
  launch(cast_kernel<T>, blocks_for_at_most(n, kThreads, 4 * kBlocks), kThreads, 0, s, q, x, n,
         static_cast<const float*>(scales), fp8_recipe::kForward);
  ZT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void matmul_forward_fp8(Gemm& gemm, T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC,
                        const uint8_t* w_copy, void* scratch, cudaStream_t s) {
  const Regions r{static_cast<char*>(scratch)};
  uint8_t *x8 = r.bytes(0), *w8_here = r.bytes(fp8_recipe::round256(int64_t(N) * C));
  quantize(x8, nullptr, r.scales(0), r.partial(0), inp, N, C, fp8_recipe::kForward, s);
  if (!w_copy) quantize(w8_here, nullptr, r.scales(1), r.partial(1), w, OC, C, fp8_recipe::kForward, s);
  const uint8_t* w8 = w_copy ? copy_bytes(w_copy) : w8_here;
  const float* w_scales = w_copy ? copy_scales(w_copy) : r.scales(1);
  Gemm::Args a;  // out^T (OC, N) column-major = w (OC,C) . x^T: A = w (k = C) transposed, B = x^T
  a.ta = true, a.tb = false, a.m = OC, a.n = N, a.k = C;
  a.A = w8, a.lda = C, a.B = x8, a.ldb = C, a.D = out, a.ldd = OC;
  a.ab_type = CUDA_R_8F_E4M3, a.b_type = CUDA_R_8F_E4M3, a.d_type = data_type<T>();
  a.a_scale = w_scales + 1, a.b_scale = r.scales(0) + 1;  // the inverse scales
  a.fast_accum = true;  // the forward only, as torchao's and Transformer Engine's recipes: not the gradients
  // the bias in the epilogue where the FP8 table's bias type is the output's (16-bit outputs; an
  // fp32 output takes a bf16 bias there): else added after
  const bool fused_bias = bias && sizeof(T) == 2;
  if (fused_bias) a.epilogue = CUBLASLT_EPILOGUE_BIAS, a.bias = bias, a.bias_type = data_type<T>();
  bool ran = gemm.run(a, s, /*may_fail=*/true);
  if (!ran && fused_bias) {  // the plain FP8 product, then the bias
    a.epilogue = CUBLASLT_EPILOGUE_DEFAULT, a.bias = nullptr;
    ran = gemm.run(a, s, true);
  }
  if (!ran) {
    if (!w) throw fp8_recipe::weight_only_in_fp8("forward", N, C, OC);
    no_fp8_algorithm("forward", N, C, OC);
    return gemm.linear_forward(out, inp, w, bias, N, C, OC, dtype_of<T>(), s);
  }
  if (bias && (!fused_bias || a.epilogue == CUBLASLT_EPILOGUE_DEFAULT)) add_bias(out, bias, N, OC, s);
}

template <typename T>
void matmul_backward_fp8(Gemm& gemm, T* dinp, float* dw, float* dbias, const T* dout, const T* inp, const T* w, int N,
                         int C, int OC, const uint8_t* w_copy, void* scratch, float* bias_scratch, cudaStream_t s) {
  const Regions r{static_cast<char*>(scratch)};
  const int64_t wt_at = 0, xt_at = fp8_recipe::round256(int64_t(C) * OC), dy_at = xt_at + fp8_recipe::round256(int64_t(C) * N),
                dyt_at = dy_at + fp8_recipe::round256(int64_t(N) * OC);
  uint8_t *wt8 = r.bytes(wt_at), *xt8 = r.bytes(xt_at), *dy8 = r.bytes(dy_at), *dyt8 = r.bytes(dyt_at);
  quantize(dinp ? dy8 : nullptr, dw ? dyt8 : nullptr, r.scales(0), r.partial(0), dout, N, OC, fp8_recipe::kGradient, s);
  if (dinp) {
    if (w_copy) transpose_fp8(wt8, copy_bytes(w_copy), OC, C, s);  // cast once per update: its bytes, transposed
    else quantize(static_cast<uint8_t*>(nullptr), wt8, r.scales(1), r.partial(1), w, OC, C, fp8_recipe::kForward, s);
    const float* w_scales = w_copy ? copy_scales(w_copy) : r.scales(1);
    Gemm::Args a;  // dinp^T (C, N) = w^T (C,OC) . dy^T: A = w^T stored (C, OC), k = OC; B = dy
    a.ta = true, a.tb = false, a.m = C, a.n = N, a.k = OC;
    a.A = wt8, a.lda = OC, a.B = dy8, a.ldb = OC, a.D = dinp, a.ldd = C;
    a.ab_type = CUDA_R_8F_E4M3, a.b_type = CUDA_R_8F_E5M2, a.d_type = data_type<T>();
    a.a_scale = w_scales + 1, a.b_scale = r.scales(0) + 1;
    if (!gemm.run(a, s, /*may_fail=*/true)) {  // the whole backward in the compute type
      if (!w) throw fp8_recipe::weight_only_in_fp8("input gradient", N, C, OC);
      no_fp8_algorithm("input gradient", N, C, OC);
      return gemm.linear_backward(dinp, dw, dbias, dout, inp, w, nullptr, N, C, OC, dtype_of<T>(), bias_scratch, s);
    }
  }
  if (!dw) return;
  quantize(static_cast<uint8_t*>(nullptr), xt8, r.scales(2), r.partial(2), inp, N, C, fp8_recipe::kForward, s);
  Gemm::Args a;  // dw^T (C, OC) += x^T (C,N) . dy: A = x^T stored (C, N), k = N; B = dy^T stored (OC, N)
  a.ta = true, a.tb = false, a.m = C, a.n = OC, a.k = N;
  a.A = xt8, a.lda = N, a.B = dyt8, a.ldb = N, a.D = dw, a.ldd = C, a.beta = 1.0f;
  a.ab_type = CUDA_R_8F_E4M3, a.b_type = CUDA_R_8F_E5M2, a.d_type = CUDA_R_32F;
  a.a_scale = r.scales(2) + 1, a.b_scale = r.scales(0) + 1;
  if (!gemm.run(a, s, /*may_fail=*/true)) {  // dinp (if asked) is written already; written again here
    no_fp8_algorithm("weight gradient", N, C, OC);
    // without the compute-type weight (gathered as FP8 alone) dinp stays the FP8 product's
    return gemm.linear_backward(w ? dinp : nullptr, dw, dbias, dout, inp, w, nullptr, N, C, OC, dtype_of<T>(),
                                bias_scratch, s);
  }
  if (dbias) bias_backward(dbias, dout, N, OC, bias_scratch, s);
}

#define ZT_INSTANTIATE(T)                                                                                       \
  template void fp8_weight_copy<T>(uint8_t*, const T*, int, int, void*, cudaStream_t);                             \
  template void fp8_amax<T>(float*, const T*, int64_t, void*, cudaStream_t);                                      \
  template void fp8_cast_with_amax<T>(uint8_t*, float*, const T*, int64_t, const float*, cudaStream_t);           \
  template void matmul_forward_fp8<T>(Gemm&, T*, const T*, const T*, const T*, int, int, int, const uint8_t*, void*, \
                                      cudaStream_t);                                                                \
  template void matmul_backward_fp8<T>(Gemm&, T*, float*, float*, const T*, const T*, const T*, int, int, int,     \
                                       const uint8_t*, void*, float*, cudaStream_t);
ZT_INSTANTIATE(float)
ZT_INSTANTIATE(__nv_bfloat16)
ZT_INSTANTIATE(__half)
#undef ZT_INSTANTIATE

}  // namespace zt::cuda
