// nvcuda::wmma on the emulated device (CUDA C++ Programming Guide, "Warp Matrix Functions"):
// 16x16x16 fragments of half / __nv_bfloat16 with float accumulators. A fragment's mapping of
// matrix elements to lanes is unspecified by the guide, so this one is deliberately scrambled (a
// fixed pseudo-random permutation per fragment kind): code that assumes a layout computes
// garbage here. load/store/mma are warp collectives; mptr must be 256-bit aligned and ldm a
// multiple of 8 elements for 16-bit types and 4 for float, the same in every lane, as the guide
// requires.
#pragma once
#include <cstdint>
#include <type_traits>

#include "engine/backend/cuda_emu/half.h"
#include "engine/backend/cuda_emu/simt.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulated device offers m16n16k16");
  static constexpr int num_elements = 8;  // 256 elements over 32 lanes
  T x[num_elements];
};

}  // namespace nvcuda::wmma

namespace zt::emu::wmma_impl {
// kind: 0 matrix_a, 1 matrix_b, 2 accumulator. Element (r, c) of a fragment of that kind lives
// in lane owner(kind, r * 16 + c) / 8, index % 8.
int owner(int kind, int element);
// Collective load / store of a 16x16 tile of element type `type` (0 float, 1 half, 2 bf16);
// col_major: element (r, c) at p[c * ldm + r].
void load(int kind, void* frag_x, int type, const void* p, unsigned ldm, bool col_major);
void store(void* p, const float* acc_x, unsigned ldm, bool col_major);
void mma(float* d, const void* a, const void* b, const float* c, int type);
}  // namespace zt::emu::wmma_impl

namespace nvcuda::wmma {

template <typename T>
constexpr int type_code() {
  if constexpr (std::is_same_v<T, float>) return 0;
  else if constexpr (std::is_same_v<T, __half>) return 1;
  else return 2;
}
template <typename Use>
constexpr int kind_code() {
  if constexpr (std::is_same_v<Use, matrix_a>) return 0;
  else if constexpr (std::is_same_v<Use, matrix_b>) return 1;
  else return 2;
}

template <typename Use, int M, int N, int K, typename T, typename L>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, T v) {
  for (auto& x : f.x) x = v;
}
template <typename Use, int M, int N, int K, typename T, typename L>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const T* p, unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load names its memory layout");
  zt::emu::wmma_impl::load(kind_code<Use>(), f.x, type_code<T>(), p, ldm, std::is_same_v<L, col_major>);
}
template <int M, int N, int K>
inline void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm, layout_t l) {
  zt::emu::wmma_impl::load(2, f.x, 0, p, ldm, l == mem_col_major);
}
template <int M, int N, int K>
inline void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm, layout_t l) {
  zt::emu::wmma_impl::store(p, f.x, ldm, l == mem_col_major);
}
template <int M, int N, int K, typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, T, LA>& a,
                     const fragment<matrix_b, M, N, K, T, LB>& b, const fragment<accumulator, M, N, K, float>& c) {
  zt::emu::wmma_impl::mma(d.x, a.x, b.x, c.x, type_code<T>());
}

}  // namespace nvcuda::wmma
