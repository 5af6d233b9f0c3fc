// NVTX ranges on the emulated device: no profiler can attach, so they are no-ops.
#pragma once
inline int nvtxRangePushA(const char*) { return 0; }
inline int nvtxRangePop() { return 0; }
