// The backend's inline PTX, each instruction in one small device function. On the GPU they are
// the instructions; on the emulated device (ZT_CUDA_EMULATED) each calls its twin in
// engine/backend/cuda_emu/ptx.h, written from the PTX ISA.
#pragma once
#include <cuda_runtime.h>  // first: on the emulated device it defines ZT_CUDA_EMULATED
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#ifdef ZT_CUDA_EMULATED
#include "engine/backend/cuda_emu/ptx.h"
#endif

namespace zt::cuda {

// d += a b on tensor cores (m16n8k16, 16-bit A and B, fp32 accumulation); fragments: PTX ISA,
// "Matrix Fragments for mma.m16n8k16 with floating point type"
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef ZT_CUDA_EMULATED
  emu::mma_m16n8k16(d, a, b0, b1, std::is_same_v<T, __nv_bfloat16> ? emu::MmaType::BF16 : emu::MmaType::F16);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
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
#ifdef ZT_CUDA_EMULATED
  emu::cp_async_16(smem, gmem, valid ? 16 : 0);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifdef ZT_CUDA_EMULATED
  emu::cp_async_commit_group();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef ZT_CUDA_EMULATED
  emu::cp_async_wait_group(N);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// N (1, 2, 4) 8 x 8 matrices of 16-bit elements from shared memory into the lanes' registers, in
// mma's fragment layout: lane 8 i + r passes row r of matrix i; register i of lane l gets matrix
// i's (row l / 4, columns 2 (l % 4) ..+1), or with Trans the transposed matrix's (PTX ISA "ldmatrix")
template <int N, bool Trans = false>
__device__ __forceinline__ void ldmatrix(uint32_t (&d)[N], const void* smem_row) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#ifdef ZT_CUDA_EMULATED
  emu::ldmatrix_m8n8(d, N, Trans, smem_row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  const unsigned s = unsigned(__cvta_generic_to_shared(smem_row));
  if constexpr (N == 4 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(s));
  else if constexpr (N == 4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(s));
  else if constexpr (N == 2 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(d[0]), "=r"(d[1]) : "r"(s));
  else if constexpr (N == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(d[0]), "=r"(d[1]) : "r"(s));
  else if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(d[0]) : "r"(s));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(d[0]) : "r"(s));
#endif
}

// 2^x by the SFU's approximation with subnormal inputs and results flushed to zero (PTX ISA
// "ex2"): exp2f without fast-math compiles to the non-ftz form plus range fix-ups, which the
// softmax never needs (its arguments are <= 0 and a result below 2^-126 adds nothing to a sum >= 1).
// The emulated device computes exp2f and flushes the same way.
__device__ __forceinline__ float exp2_ftz(float x) {
#ifdef ZT_CUDA_EMULATED
  const float y = exp2f(std::fpclassify(x) == FP_SUBNORMAL ? 0.0f : x);
  return std::fpclassify(y) == FP_SUBNORMAL ? 0.0f : y;
#elif defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// p[0] += a, p[1] += b atomically, p 8-byte aligned in global memory: on sm_90 one vector
// reduction (PTX ISA "red", .v2.f32), half the atomic transactions of two scalar ones; before
// sm_90 and on the emulated device, two scalar atomics (the pair is not one atomic there, nor
// needs to be: each element is a separate sum).
__device__ __forceinline__ void atomic_add_f32x2(float* p, float a, float b) {
#if !defined(ZT_CUDA_EMULATED) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

}  // namespace zt::cuda
