// A job's model states as checkpoints, Hugging Face imports and debugging see them: this rank's
// parameters and AdamW moments as runs in global coordinates (each tensor's full, unsharded
// layout), whatever the ZeRO stage, the tier they live in or the tensor-parallel split. The ZeRO
// store (engine/parallel/param_store.h) implements it; engine/checkpoint and engine/hf depend on
// this, not on the store.
#pragma once
#include <cstddef>
#include <vector>

namespace zt {

// The states of one element: fp32 master weight, gradient, AdamW's first and second moments.
enum class StateKind { Master, Grad, AdamM, AdamV };

class ModelStates {
 public:
  virtual ~ModelStates() = default;
  using State = StateKind;
  // `n` consecutive elements of a tensor's full (unsharded, row-major) layout, starting at
  // `global_begin`, held contiguously in the store's span `span` from `span_off`. `owner`: this
  // rank is the one that writes the run (data-parallel copies at stage 0 and tensors replicated
  // across the tensor-parallel group are held by several ranks; each run has one owner in the job).
  struct GlobalRun {
    int param;  // index into Model::params()
    size_t global_begin, n;
    int span;
    size_t span_off;
    bool owner;
  };
  virtual const std::vector<GlobalRun>& global_runs() const = 0;
  // Host copies of elements [off, off + n) of a run's state, and back. After writing masters,
  // publish_written_masters() (collective) refreshes the compute copy and the other ranks' views.
  virtual void read_run(State s, const GlobalRun& r, size_t off, size_t n, float* host) const = 0;
  virtual void write_run(State s, const GlobalRun& r, size_t off, size_t n, const float* host) = 0;
  void read_run(State s, const GlobalRun& r, float* host) const { read_run(s, r, 0, r.n, host); }
  void write_run(State s, const GlobalRun& r, const float* host) { write_run(s, r, 0, r.n, host); }
  // The run's elements in the backend's memory (host memory on the CPU backend: checkpoint writes
  // read them in place there instead of copying); null for states that are not in memory (NVMe).
  virtual const float* run_data(State s, const GlobalRun& r) const = 0;
  virtual void publish_written_masters() = 0;

  // Debugging and tests: the full parameters / reduced gradients in the unsharded model's flat
  // layout (global offsets and shapes of Model::params()), as host vectors; the compute-precision
  // copy the model reads (widened to fp32; empty in fp32). Collective when the states are sharded
  // (ZeRO or tensor parallelism): every rank must call them.
  virtual std::vector<float> full_params() = 0;
  virtual std::vector<float> full_grads() = 0;
  virtual std::vector<float> full_compute_params() = 0;
};

}  // namespace zt
