// The FlashAttention-2 kernels' tiles and shared memory (attention_fa2.cu), as plain C++: the
// launches size their shared memory from here, and tools/kernel_report.py prints it beside each
// kernel's registers and instruction mix (blocks per SM follow from both).
#pragma once
#include <cstddef>

namespace zt::cuda::fa2 {

constexpr int kRows = 64;   // query rows per block (dQ, and the first generation's forward)
constexpr int kWarps = 4;   // warps per block
constexpr int kKeys = 64;   // key rows per K/V tile
constexpr int kThreads = 32 * kWarps;

// The forward's 16-row m-tiles per warp: at head size 64 each warp takes 32 query rows, so every
// K and V fragment read from shared memory feeds two mma; at 128, O alone takes 64 fp32 registers
// a thread for 16 rows, and 32 rows would spill.
constexpr int forward_m_tiles(int hs) { return hs > 64 ? 1 : 2; }
constexpr int forward_rows(int hs) { return kWarps * 16 * forward_m_tiles(hs); }  // query rows per block

// query rows per tile streamed by the dK/dV kernel: at head size 128, dK and dV take 128 fp32
// registers a thread, so the tiles are halved
constexpr int dkdv_query_rows(int hs) { return hs > 64 ? 32 : 64; }

// The backward in FlashAttention-2's 5 matrix-product units: the dK/dV pass also makes each query
// tile's dQ contribution (dS K) and adds it into an fp32 (B, T, C) accumulator with atomics, so
// its sum's order varies run to run. [run] deterministic keeps the 7-unit plan instead (a dQ pass
// that recomputes S and dP, no atomics). 16-bit types and head sizes 64 and 128 only.
constexpr bool backward_accumulates_dq(int hs, size_t elem, bool deterministic) {
  return elem == 2 && (hs == 64 || hs == 128) && !deterministic;
}
// The attention backward's device scratch, in floats: D = rowsum(dO * O) (B, NH, T), then the dQ
// accumulator (B, T, C) where it is used, from a 16-byte boundary (the kernels need at least 8: at
// an odd B NH T it was 4-byte aligned, and the backward quietly fell back to the WMMA kernels).
// The CUDA backend and the planner both size it here.
constexpr long long dq_accumulator_offset_floats(int B, int T, int NH) { return ((long long)B * NH * T + 3) / 4 * 4; }
constexpr long long backward_scratch_floats(int B, int T, int C, int NH, size_t elem, bool deterministic) {
  return backward_accumulates_dq(C / NH, elem, deterministic) ? dq_accumulator_offset_floats(B, T, NH) + (long long)B * T * C
                                                              : (long long)B * NH * T;
}

// Shared rows are padded by 8 elements (16 bytes): the quads' 32-bit reads spread over banks.
constexpr size_t padded_row(int hs) { return size_t(hs) + 8; }

// Bytes of dynamic shared memory, for element size `elem` (2: bf16, fp16).
// forward and dQ: [2 buffers][K, V][kKeys][hs + 8]
constexpr size_t forward_smem(int hs, size_t elem) { return size_t(2) * 2 * kKeys * padded_row(hs) * elem; }
// dQ with packed documents: + the block's rows' first keys [kRows] int32
constexpr size_t dq_smem(int hs, size_t elem, bool docs = false) { return forward_smem(hs, elem) + (docs ? kRows * 4 : 0); }
// The dK/dV kernel's per-query statistics: lse2 and D, and with packed documents each query's
// first key.
constexpr int dkdv_stat_rows(bool docs) { return docs ? 3 : 2; }
// dK/dV: [2][Q, dO][q rows][hs + 8], [2][stat rows][q rows] floats, and at 128 the K, V rows; with
// dQ (`dq`) also K's rows at 64 (dQ's B operand) and the tile's dS^T [kKeys][q rows + 8]
constexpr size_t dkdv_smem(int hs, size_t elem, bool dq = false, bool docs = false) {
  const size_t q = size_t(dkdv_query_rows(hs));
  const size_t kv_rows = hs > 64 ? 2 * kKeys : dq ? kKeys : 0;
  return size_t(2) * 2 * q * padded_row(hs) * elem + size_t(2) * dkdv_stat_rows(docs) * q * sizeof(float) +
         kv_rows * padded_row(hs) * elem + (dq ? size_t(kKeys) * (q + 8) * elem : 0);
}

}  // namespace zt::cuda::fa2
