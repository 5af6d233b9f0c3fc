// The training step (see step.h).
#include "engine/job/step.h"

#include <cmath>

#include "engine/core/status.h"
#include "engine/optim/optimizer_step.h"
#include "engine/optim/schedule.h"

namespace zt {

StepResult train_step(Job& job, int64_t step, const MicroBatchSource& next, StepHook& hooks) {
  const RunSpec& spec = job.spec;
  ParamStore& store = *job.store;
  Model& model = *job.model;
  const int B = int(spec.train.micro_batch), T = int(spec.model.seq_len);
  const int64_t accum = job.micro_batches;
  StepResult r;
  r.step = step;
  r.lr = lr_at(spec.optim, step, spec.train.max_steps);
  r.loss_scale = job.scaler.scale();
  // Every micro-batch contributes its mean loss / (micro-batches in the global batch), so the
  // summed (reduced) gradient is that of the mean over the global batch.
  const int64_t global_micro = spec.train.global_batch / B;
  const float grad_scale = float(r.loss_scale / double(int64_t(B) * T * global_micro));
  hooks.step_begin(step);
  store.zero_grad();
  // With optimizer offload to CPU memory, each group's host AdamW may run while backward goes on,
  // where nothing global (clipping by the norm, fp16 unscaling) must first touch the gradients.
  // Not with spike_policy = "skip": a step must be judged before it is applied.
  r.early_update = spec.optim.grad_clip == 0 && !job.scaler.active() && spec.train.spike_policy == SpikePolicy::Off &&
                   schedule_early_adamw(job.early, *job.optimizer, r.lr, job.adam_steps + 1);
  for (int64_t micro = 0; micro < accum; ++micro) {
    next(micro, job.inputs.data(), job.targets.data());
    store.set_last_micro_batch(micro == accum - 1);
    if (micro == accum - 1) store.prefetch_optimizer_states();  // NVMe: the step's first reads, now
    hooks.forward_begin(step, micro);
    model.forward_deferred(job.inputs.data(), job.targets.data(), B, T, grad_scale);
    hooks.backward_begin(step, micro);
    model.backward();
    hooks.backward_end(step, micro);
  }
  hooks.reduction_begin(step);
  store.finish_backward();  // the last gradient reductions: backward's tail
  hooks.gradients_final(step);
  double loss = model.take_losses() / double(global_micro);
  job.topo.dp_group->all_reduce_doubles(&loss, 1);
  hooks.loss_reduced(step, loss);
  hooks.optimizer_begin(step);
  r.loss = float(loss);
  r.grad_norm = job.optimizer->clip_grad_norm(store.spans(), store.norm_group(), spec.optim.grad_clip, r.loss_scale);
  // Every rank must decide alike. The loss is reduced over the data-parallel group, but the norm
  // only over the ranks that hold distinct gradients: a NaN that one replica's copy got after the
  // reduction is agreed on here (two doubles per step). Rank 0's loss goes with it, so that the
  // spike test reads the same bits everywhere.
  const bool finite = std::isfinite(r.grad_norm) && std::isfinite(loss);
  double agree[2] = {finite ? 0.0 : 1.0, job.topo.is_root() ? loss : 0.0};
  job.topo.world->all_reduce_doubles(agree, 2);
  if (agree[0] > 0 && finite) r.grad_norm = std::nan("");
  if (agree[0] == 0) loss = agree[1], r.loss = float(loss);
  // fp16's scaler takes its overflows first; then non-finite values in any precision, and spikes.
  r.skipped = !job.scaler.update(std::isfinite(r.grad_norm));
  if (!r.skipped) r.skip_reason = job.skips.judge(step, loss, r.grad_norm);
  if (!r.skip_reason.empty() && r.early_update)
    throw RuntimeFailure(fmt::format("step {}: {}, but the host AdamW had already applied it while backward went on "
                                     "([offload] with grad_clip = 0 and no loss scaling): set [optim] grad_clip so "
                                     "that a step is judged before it is applied", step + 1, r.skip_reason));
  r.skipped |= !r.skip_reason.empty();
  if (!r.skipped) {
    adamw_step(store, job.early, *job.optimizer, r.lr, ++job.adam_steps);
    store.publish_params();
  }
  r.skipped_total = job.scaler.skipped() + job.skips.skipped();
  hooks.optimizer_end(step);
  job.backend.synchronize();
  hooks.step_end(step, r);
  return r;
}

}  // namespace zt
