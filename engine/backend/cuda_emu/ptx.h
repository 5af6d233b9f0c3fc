// The emulated twins of the inline PTX in engine/backend/cuda/ptx.cuh, written from the PTX ISA
// (not from the kernels that use them):
// - mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32: PTX ISA, "Matrix Fragments
//   for mma.m16n8k16 with floating point type". With groupID = laneid >> 2 and
//   threadID_in_group = laneid % 4, each lane holds A elements a0..a7 (two 16-bit values per
//   32-bit register, the lower index in the low half): row = groupID for a0, a1, a4, a5, groupID + 8
//   otherwise; col = threadID_in_group * 2 + (i & 1), + 8 for a4..a7. B (k x n) b0..b3: row (k)
//   = threadID_in_group * 2 + (i & 1), + 8 for b2, b3; col (n) = groupID. C and D c0..c3: row =
//   groupID for c0, c1, groupID + 8 for c2, c3; col = threadID_in_group * 2 + (i & 1).
//   ".sync.aligned": every lane of the warp executes it (a warp collective with the full mask).
//   Products of 16-bit inputs are exact in fp32; the sum runs over k in order in fp32 (the
//   hardware's internal order and rounding are unspecified: not emulated).
// - cp.async.cg.shared.global [dst], [src], 16, src_size: PTX ISA "cp.async": copies 16 bytes,
//   the bytes past src_size are zero-filled; completion is tracked per thread by
//   cp.async.commit_group / cp.async.wait_group N (all but the newest N groups complete). The
//   destination must be shared memory; here it holds poison until the wait that completes its
//   group, so a read before the wait reads poison (0xFF bytes: NaN in every float type).
// - ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16 {d..}, [row]: PTX ISA "ldmatrix":
//   a warp loads 1, 2 or 4 matrices of 8 x 8 16-bit elements from shared memory; lane 8 i + r
//   gives the address of row r of matrix i (8 contiguous elements, 16-byte aligned; the other
//   lanes' addresses are not used). Destination register i of lane l holds matrix i's elements
//   (row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1), the lower column in the low half; with
//   .trans, the transposed matrix's: (rows 2 (l % 4) and 2 (l % 4) + 1, column l / 4). Every lane
//   must execute it with the same qualifiers (a warp collective, full mask).
#pragma once
#include <cstdint>
#include <cstring>

#include "engine/backend/cuda_emu/simt.h"

namespace zt::emu {

enum class MmaType { BF16, F16 };
void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, MmaType t);

void cp_async_16(void* shared_dst, const void* global_src, int src_size);
void cp_async_commit_group();
void cp_async_wait_group(int n);

// `num` matrices (1, 2, 4) into d[0..num), the calling lane's row address `row`
void ldmatrix_m8n8(uint32_t* d, int num, bool trans, const void* row);

}  // namespace zt::emu
