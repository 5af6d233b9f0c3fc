// How fast a run goes against what the hardware could do: the model FLOPs per token, the peak the
// MFU is judged against (a table of GPUs, [run] peak_tflops, or on the CPU a GEMM probe), and the
// step breakdown's names.
#pragma once
#include <string>

#include "engine/backend/backend.h"
#include "engine/config/spec.h"

namespace zt {

// Training FLOPs per token (forward + backward) of a transformer with `n_params` parameters:
// 6 N for the matrix products plus 12 L C T for attention's scores and weighted sums (the PaLM
// paper's appendix B, as nanoGPT and llm.c count; no discount for causal masking).
double flops_per_token(const RunSpec::Model& m, double n_params);

// Dense peak TFLOP/s of one device of `backend` in the run's compute precision, and where the
// figure comes from ("[run] peak_tflops", "table: NVIDIA H100 ...", "measured: fp32 GEMM probe").
struct Peak {
  double tflops = 0;
  std::string source;
};
// On the CPU this runs a short GEMM probe on the backend, in plain host buffers outside the
// backend's memory figures, so it changes no peak.
Peak device_peak(const RunSpec& spec, Backend& backend);

}  // namespace zt
