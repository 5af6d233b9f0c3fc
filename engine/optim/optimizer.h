// AdamW over a model's parameter table: fp32 moments in backend memory, decoupled weight decay on
// the tensors marked `decay`, global-norm gradient clipping as torch.nn.utils.clip_grad_norm_.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/config/spec.h"
#include "models/gpt2.h"

namespace zt {

class AdamW {
 public:
  AdamW(const RunSpec::Optim& cfg, Backend& backend, size_t n_params);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // Global L2 norm of `grads` (n floats).
  double grad_norm(const float* grads, size_t n);
  // Scales grads by max_norm / (norm + 1e-6) when that is < 1 (torch's rule); returns the norm.
  double clip(float* grads, size_t n, double max_norm);
  // One step (t counts from 1) over every tensor of `table`.
  void step(float* params, const float* grads, const std::vector<ParamInfo>& table, double lr, int t);

 private:
  RunSpec::Optim cfg_;
  Backend& be_;
  float* m_ = nullptr;
  float* v_ = nullptr;
};

}  // namespace zt
