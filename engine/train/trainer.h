// The training loop: data -> forward/backward with gradient accumulation -> clip -> AdamW,
// with progress lines, metrics.jsonl, periodic evaluation and a generated sample at the end.
#pragma once
#include <functional>
#include <memory>
#include <optional>

#include "data/loader.h"
#include "engine/backend/backend.h"
#include "engine/config/spec.h"
#include "engine/optim/optimizer.h"
#include "models/gpt2.h"

namespace zt {

struct StepResult {
  int64_t step = 0;  // 0-based optimizer step
  float loss = 0;    // mean over the global batch
  double lr = 0, grad_norm = 0, step_ms = 0, tokens_per_s = 0;
};

class Trainer {
 public:
  // Builds backend, model (initialized from run.seed), optimizer and datasets.
  explicit Trainer(const RunSpec& spec);
  ~Trainer();

  // One optimizer step over global_batch sequences (global_batch / micro_batch micro-steps).
  StepResult step(int64_t step);
  // Mean loss over eval_steps micro-batches of the validation set (in dataset order).
  float evaluate();
  // The whole run: writes config.resolved.toml and metrics.jsonl under run.out_dir.
  void run();

  GPT2& model() { return *model_; }
  Backend& backend() { return *backend_; }
  data::SampleOrder& train_order() { return *train_order_; }
  const data::TokenDataset& train_data() const { return *train_; }

  // Called with each micro-batch (inputs, targets: (micro_batch, seq_len)) before it is used.
  std::function<void(const int32_t*, const int32_t*)> on_batch;

 private:
  RunSpec spec_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<GPT2> model_;
  std::unique_ptr<AdamW> optim_;
  std::unique_ptr<data::TokenDataset> train_, val_;
  std::unique_ptr<data::SampleOrder> train_order_;
  std::vector<int32_t> inputs_, targets_;  // (micro_batch, seq_len) host staging
};

}  // namespace zt
