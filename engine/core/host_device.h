// ZT_HOST_DEVICE: a function both host code and CUDA kernels call (header-only arithmetic shared by
// the CPU reference and the kernels: Philox, RoPE's frequency rule).
#pragma once

#if defined(__CUDACC__)
#define ZT_HOST_DEVICE __host__ __device__
#else
#define ZT_HOST_DEVICE
#endif
