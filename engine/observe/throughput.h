// How fast a run goes against what the hardware could do: the model FLOPs per token, the peak the
// MFU is judged against (a table of GPUs, [run] peak_tflops, or on the CPU a GEMM probe), and the
// step breakdown's names.
#pragma once
#include <string>

#include "engine/backend/backend.h"
#include "engine/config/spec.h"

namespace zt {

// Training FLOPs per token (forward + backward) the model needs: 6 N for the matrix products,
// N = `matmul_params` (the family's count: the linear layers and the head, not the embedding
// lookups, norms or biases), plus 6 L Q T for causal attention's scores and weighted sums (half
// of the 12 L Q T of all T x T pairs: the causal half is all the model needs; Q = n_head x the
// head width, which is d_model but where head_dim says otherwise: Qwen3, Mistral Nemo). The one formula of
// every MFU ztrain prints, measured or planned: the plan counts at least these FLOPs on the
// device (the masked tiles on the diagonal, recompute), so a planned MFU stays under 100%.
// nanoGPT, llm.c and PaLM's appendix B count 6 N (all parameters) + 12 L C T: about 7% more
// for GPT-2 124M at T = 1024 (docs/observability.md). Inline: the job (model library) uses it.
// With low-rank adapters ([lora], `lora_params` > 0) the frozen matrices make no weight
// gradient: 4 N for them (forward, input gradient), 6 for each adapter parameter.
inline double flops_per_token(const RunSpec::Model& m, double matmul_params, double lora_params = 0) {
  return (lora_params > 0 ? 4.0 * matmul_params + 6.0 * lora_params : 6.0 * matmul_params) +
         6.0 * double(m.n_layer) * double(m.n_head) * double(m.head_size()) * double(m.seq_len);
}

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
