// One training job's model and states, built in one place: the model on the backend over the
// topology's tensor group, the ZeRO placement's parameter store, AdamW over the store's states,
// the loss scaler and the skip policy. The trainer builds it over the run's backend and
// communicators, the planner over its counting backend and shape-only groups (so that what it
// plans is what runs), dump-state through the trainer, the tests and the GPU check on their own
// backends; every one of them then runs the one step (step.h) on it.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/comm/topology.h"
#include "engine/config/spec.h"
#include "engine/job/skip_policy.h"
#include "engine/model/model.h"
#include "engine/optim/adamw.h"
#include "engine/optim/early_update.h"
#include "engine/optim/loss_scaler.h"
#include "engine/parallel/param_store.h"
#include "engine/config/zero_placement.h"

namespace zt {

// Micro-batches per step on each data-parallel rank; UserError (naming the spec) when
// global_batch is not a multiple of micro_batch x the data-parallel degree.
int64_t micro_batches_per_step(const RunSpec& spec, const Topology& topo);

// Training FLOPs per token of [model] m: observe/throughput.h's one formula over its family's
// matmul parameters (MFU's numerator, the trainer's and the planner's).
// With [lora] l: the frozen matrices' weight gradients left out, the adapters' counted.
double model_flops_per_token(const RunSpec::Model& m, const RunSpec::Lora& l = {});

// The backend set up for the spec: compute precision ([precision] compute resolved for its kind),
// deterministic kernels, and every op the model will call asked before anything is built
// ("not supported" is a UserError, a start-up error).
void configure_backend(const RunSpec& spec, Backend& backend);

class Job {
 public:
  // Builds the model (from spec.model unless `model` is given: tests build theirs), the store
  // placed as `placement` says (parameters not initialized: init_params() or a checkpoint does
  // that), the optimizer and the scaler. `topo` and `backend` outlive the job.
  Job(const RunSpec& spec, Topology& topo, Backend& backend, const ZeroPlacement& placement,
      std::unique_ptr<Model> model = nullptr);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Every parameter from the counter-based RNG (seed, name, global index): layout-independent.
  void init_params(uint64_t seed);

  const RunSpec spec;
  Topology& topo;
  Backend& backend;
  const int64_t micro_batches;  // per step on this rank
  std::unique_ptr<Model> model;
  // With [lora] the model's own weights are frozen in `base` (parameters only) and `store` holds
  // the adapters that train; otherwise `base` is null and `store` holds the model's weights.
  std::unique_ptr<ParamStore> base;
  std::unique_ptr<ParamStore> store;  // what trains: AdamW, clipping, checkpoints
  // The table of what trains (the adapters', or the model's), and the store of the model's weights
  // (what a Hugging Face import writes, what the base hash reads).
  const ParamTable& trained_table() const { return store_table(*model); }
  ParamStore& weights() { return base ? *base : *store; }
  static const ParamTable& store_table(const Model& m) { return m.adapter_table() ? *m.adapter_table() : m.table(); }
  std::unique_ptr<AdamW> optimizer;
  EarlyUpdate early;  // the host AdamW during backward, where it applies (destroyed before the two above it uses)
  LossScaler scaler;
  SkipPolicy skips;           // non-finite steps and loss spikes
  int adam_steps = 0;         // applied updates (AdamW's t; skipped steps excluded)
  std::vector<int32_t> inputs, targets;  // (micro_batch, seq_len): the step's last micro-batch on the host
  std::vector<int32_t> batches;          // the step's micro-batches read ahead, or positions (step.cpp)
};

}  // namespace zt
