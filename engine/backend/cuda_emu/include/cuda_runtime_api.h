// Emulated-device stand-in for the toolkit's cuda_runtime_api.h: the same declarations as
// cuda_runtime.h here (the toolkit splits the C API into this header; the emulation has one).
#pragma once
#include <cuda_runtime.h>
