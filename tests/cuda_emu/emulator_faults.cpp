// The emulated device's own checks, each provoked once by a small kernel written to break one
// rule (tests/cuda_emu/emulator_faults.py runs every case in its own process, since a device
// fault is sticky, and requires the report it names). Compiled as a kernel module of the emulated
// device (ZT_EMU_KERNEL_MODULE) against engine/backend/cuda_emu/include.
//   emulator_faults CASE   exits 0 when the device reported nothing, 3 when a CUDA call failed
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "engine/backend/cuda/ptx.cuh"

namespace zt::cuda {
namespace {

// half of each warp waits at a barrier, the other half in a shuffle that needs the first half:
// neither is ever reached by all it waits for
__global__ void barrier_divergence(float* out) {
  if (threadIdx.x % 32 < 16) __syncthreads();
  else out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
// a lane calls a shuffle whose mask leaves it out
__global__ void shuffle_mask_excludes_caller(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, float(threadIdx.x), 1);
}
// a full-warp mask in a block of 48 threads: lanes 16-31 of warp 1 do not exist
__global__ void shuffle_partial_warp(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, float(threadIdx.x), 1);
}
// lanes of one warp in two different collectives at once
__global__ void lanes_disagree(float* out) {
  if (threadIdx.x % 2) out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  else __syncwarp();
}
// a shuffle's lanes wait for one that returned early
__global__ void lane_exits_early(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
// a read one element past a device allocation that ends on a page
__global__ void read_past_end(float* out, const float* in, int n) { out[0] = in[n]; }
// shared memory read before anything wrote it: poison (NaN)
__global__ void read_unwritten_shared(float* out) {
  __shared__ float tile[64];
  if (threadIdx.x == 0) tile[0] = 1;
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x];  // only tile[0] was written
}
// a write one element before a device allocation (in the gap under it)
__global__ void write_before_start(float* p) { p[-1] = 1; }
// a correct kernel for the controls
__global__ void shuffle_sum(float* out) {
  float v = float(threadIdx.x);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  out[threadIdx.x] = v;
}

// ldmatrix x1, x2, x4, plain and .trans, from a shared tile of 4 matrices whose element (row r,
// column c) of matrix i is i * 64 + r * 8 + c; out[variant][lane][register] (6 variants x 32 x 4)
__global__ void ldmatrix_all(uint32_t* out) {
  __shared__ __align__(16) uint16_t tile[4][8][8 + 8];  // rows padded: the row addresses are what counts
  for (int i = threadIdx.x; i < 4 * 8 * 8; i += blockDim.x) tile[i / 64][i / 8 % 8][i % 8] = uint16_t(i);
  __syncthreads();
  const int l = threadIdx.x;
  const void* row = &tile[l / 8][l % 8][0];
  uint32_t* o = out + l * 4;
  uint32_t d1[1], d2[2], d4[4];
  ldmatrix<1>(d1, row), o[0] = d1[0];
  ldmatrix<2>(d2, row), o[128] = d2[0], o[129] = d2[1];
  ldmatrix<4>(d4, row);
  for (int i = 0; i < 4; ++i) o[256 + i] = d4[i];
  ldmatrix<1, true>(d1, row), o[384] = d1[0];
  ldmatrix<2, true>(d2, row), o[512] = d2[0], o[513] = d2[1];
  ldmatrix<4, true>(d4, row);
  for (int i = 0; i < 4; ++i) o[640 + i] = d4[i];
}
// ldmatrix from a device (global) address
__global__ void ldmatrix_global(uint32_t* out) {
  uint32_t d[4];
  ldmatrix<4>(d, out + (threadIdx.x % 8) * 4);
  out[threadIdx.x] = d[0];
}
// row addresses 2 bytes off a 16-byte boundary
__global__ void ldmatrix_misaligned(uint32_t* out) {
  __shared__ __align__(16) uint16_t tile[8 * 8 + 8];
  for (int i = threadIdx.x; i < 72; i += blockDim.x) tile[i] = uint16_t(i);
  __syncthreads();
  uint32_t d[1];
  ldmatrix<1>(d, tile + (threadIdx.x % 8) * 8 + 1);
  out[threadIdx.x] = d[0];
}

// The layouts ldmatrix_all must produce, from the PTX ISA's words (ptx.h): register i of lane l
// holds matrix i's (row l / 4, columns 2 (l % 4), +1), or with .trans (rows 2 (l % 4), +1, column l / 4)
int check_ldmatrix(const uint32_t* h) {
  const int nums[3] = {1, 2, 4};
  int wrong = 0;
  for (int v = 0; v < 6; ++v)
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < nums[v % 3]; ++i) {
        const bool trans = v >= 3;
        const int r = l / 4, c = 2 * (l % 4);
        const uint32_t lo = trans ? uint32_t(i * 64 + c * 8 + r) : uint32_t(i * 64 + r * 8 + c);
        const uint32_t hi = trans ? lo + 8 : lo + 1, want = lo | hi << 16, got = h[v * 128 + l * 4 + i];
        if (got != want && wrong++ < 5)
          std::printf("ldmatrix x%d%s lane %d register %d: 0x%08x, want 0x%08x\n", nums[v % 3], trans ? ".trans" : "",
                      l, i, got, want);
      }
  if (wrong) return 4;
  std::puts("ldmatrix x1, x2, x4 and .trans: the PTX ISA's layouts");
  return 0;
}

int run(const std::string& c) {
  float* d = nullptr;
  if (cudaMalloc(&d, 1024 * sizeof(float)) != cudaSuccess) return 3;  // 4096 bytes: ends on a page
  if (c == "barrier_divergence") launch(barrier_divergence, 1, 64, 0, nullptr, d);
  else if (c == "shuffle_mask_excludes_caller") launch(shuffle_mask_excludes_caller, 1, 32, 0, nullptr, d);
  else if (c == "shuffle_partial_warp") launch(shuffle_partial_warp, 1, 48, 0, nullptr, d);
  else if (c == "lanes_disagree") launch(lanes_disagree, 1, 32, 0, nullptr, d);
  else if (c == "lane_exits_early") launch(lane_exits_early, 1, 32, 0, nullptr, d);
  else if (c == "read_past_end") launch(read_past_end, 1, 1, 0, nullptr, d, static_cast<const float*>(d), 1024);
  else if (c == "write_before_start") {
    float* small = nullptr;
    if (cudaMalloc(&small, 1000) != cudaSuccess) return 3;  // not a page: a gap below it
    launch(write_before_start, 1, 1, 0, nullptr, small);
  } else if (c == "fault_then_event") {  // waits on events after a fault return (with the error)
    cudaStream_t s2;
    cudaEvent_t e;
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    cudaEventCreate(&e);
    launch(barrier_divergence, 1, 64, 0, nullptr, d);
    cudaEventRecord(e, nullptr);
    cudaStreamWaitEvent(s2, e, 0);
    const cudaError_t a = cudaEventSynchronize(e), b = cudaStreamSynchronize(s2);
    std::printf("after the fault: cudaEventSynchronize %s, cudaStreamSynchronize %s\n", cudaGetErrorName(a),
                cudaGetErrorName(b));
    return a != cudaSuccess && b != cudaSuccess ? 3 : 0;
  } else if (c == "ldmatrix_layouts") {
    auto* u = reinterpret_cast<uint32_t*>(d);
    launch(ldmatrix_all, 1, 32, 0, nullptr, u);
    uint32_t h[768];
    if (cudaMemcpy(h, u, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) return 3;
    return check_ldmatrix(h);
  } else if (c == "ldmatrix_global") launch(ldmatrix_global, 1, 32, 0, nullptr, reinterpret_cast<uint32_t*>(d));
  else if (c == "ldmatrix_misaligned") launch(ldmatrix_misaligned, 1, 32, 0, nullptr, reinterpret_cast<uint32_t*>(d));
  else if (c == "too_many_threads") launch(shuffle_sum, 1, 2048, 0, nullptr, d);
  else if (c == "shared_over_default_limit") launch(shuffle_sum, 1, 32, 64 * 1024, nullptr, d);
  else if (c == "shared_over_optin_limit") {
    if (cudaFuncSetAttribute(shuffle_sum, cudaFuncAttributeMaxDynamicSharedMemorySize, 240 * 1024) == cudaSuccess) {
      std::puts("cudaFuncSetAttribute accepted 240 KB, past the 227 KB opt-in limit");
      return 0;
    }
    std::puts("cudaFuncSetAttribute refused 240 KB: invalid argument");
    return 3;
  } else if (c == "read_unwritten_shared" || c == "control") {
    c == "control" ? launch(shuffle_sum, 1, 64, 0, nullptr, d) : launch(read_unwritten_shared, 1, 64, 0, nullptr, d);
    float h[64];
    if (cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) return 3;
    for (int i = 0; i < 64; ++i) {
      const float want = c == "control" ? float((i / 32) * 32 * 32 + 496) : (i == 0 ? 1.0f : h[i]);
      if (c == "control" ? h[i] != want : h[i] == h[i] && i > 0) {
        std::printf("element %d is %g\n", i, h[i]);
        return 4;
      }
    }
    std::puts(c == "control" ? "control: shuffles and barrier right" : "unwritten shared memory read as NaN");
    return c == "control" ? 0 : 5;
  } else {
    std::fprintf(stderr, "emulator_faults: unknown case %s\n", c.c_str());
    return 2;
  }
  const cudaError_t launch_error = cudaGetLastError();
  const cudaError_t sync_error = cudaDeviceSynchronize();
  std::printf("launch: %s; synchronize: %s\n", cudaGetErrorString(launch_error), cudaGetErrorString(sync_error));
  return launch_error == cudaSuccess && sync_error == cudaSuccess ? 0 : 3;
}

}  // namespace
}  // namespace zt::cuda

int main(int argc, char** argv) { return argc < 2 ? 2 : zt::cuda::run(argv[1]); }
