// The training step (see step.h).
#include "engine/job/step.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "data/sample_order.h"
#include "engine/core/status.h"
#include "engine/optim/optimizer_step.h"
#include "engine/optim/schedule.h"

namespace zt {

namespace {
// The step's micro-batches, and the global batch's tokens with loss. The loss is the mean over
// those tokens, and each token's loss gradient is scaled by 1 / their count on every rank and
// micro-batch alike, so gradient accumulation and data parallelism give the mean over the same
// tokens whatever the layout. Without packing every position carries loss and the count is the
// global batch's: micro-batches are read as the step needs them. With packing (prompt tokens,
// padding and documents' ends carry none) they are all read first and counted, and one all-reduce
// over the data-parallel ranks sums the counts (Hugging Face's num_items_in_batch). Either way
// job.inputs and job.targets end up holding the step's last micro-batch (the checkpoint's resume
// probe is taken from them).
class StepBatches {
 public:
  StepBatches(Job& job, const MicroBatchSource& next, StepResult& r)
      : job_(job), next_(next), ahead_(job.spec.data.packing != Packing::None),
        bt_(job.spec.train.micro_batch * job.spec.model.seq_len) {
    const int64_t accum = job.micro_batches;
    job.batches.resize(size_t((ahead_ ? accum * 3 : 1) * bt_));
    buf_ = job.batches.data();
    loss_tokens = double(job.spec.train.global_batch) * double(job.spec.model.seq_len);
    if (!ahead_) return;
    double counts[2] = {0, 0};  // tokens with loss, documents
    for (int64_t micro = 0; micro < accum; ++micro) {
      read_.push_back(at(micro));
      next_(micro, read_.back());
      counts[0] += double(zt::loss_tokens(read_.back().targets, bt_));
      counts[1] += double(read_.back().documents);
    }
    job.topo.dp_group->all_reduce_doubles(counts, 2);
    std::copy(read_.back().inputs, read_.back().inputs + bt_, job.inputs.begin());
    std::copy(read_.back().targets, read_.back().targets + bt_, job.targets.begin());
    loss_tokens = counts[0];
    r.loss_tokens = int64_t(counts[0]), r.documents = int64_t(counts[1]);
  }
  MicroBatch get(int64_t micro) {
    if (ahead_) return read_[size_t(micro)];
    MicroBatch mb{job_.inputs.data(), job_.targets.data(), buf_};  // positions in job.batches
    next_(micro, mb);
    return mb;
  }
  double loss_tokens;  // in the global batch

 private:
  MicroBatch at(int64_t i) const {
    int32_t* p = buf_ + i * 3 * bt_;
    return MicroBatch{p, p + bt_, p + 2 * bt_};
  }
  Job& job_;
  const MicroBatchSource& next_;
  const bool ahead_;
  const int64_t bt_;
  int32_t* buf_;
  std::vector<MicroBatch> read_;
};
}  // namespace

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
  hooks.step_begin(step);
  StepBatches batches(job, next, r);
  const double tokens = std::max(batches.loss_tokens, 1.0);  // a batch without loss: no gradient, loss 0
  const float grad_scale = float(r.loss_scale / tokens);
  store.zero_grad();
  // With optimizer offload to CPU memory, each group's host AdamW may run while backward goes on,
  // where nothing global (clipping by the norm, fp16 unscaling) must first touch the gradients.
  // Not with spike_policy = "skip": a step must be judged before it is applied.
  r.early_update = spec.optim.grad_clip == 0 && !job.scaler.active() && spec.train.spike_policy == SpikePolicy::Off &&
                   schedule_early_adamw(job.early, *job.optimizer, r.lr, job.adam_steps + 1);
  for (int64_t micro = 0; micro < accum; ++micro) {
    MicroBatch mb = batches.get(micro);
    store.set_last_micro_batch(micro == accum - 1);
    if (micro == accum - 1) store.prefetch_optimizer_states();  // NVMe: the step's first reads, now
    hooks.forward_begin(step, micro);
    model.set_batch_origin(uint64_t(spec.run.seed),
                           data::micro_batch_first_sample(uint64_t(step * accum + micro), spec.train.global_batch,
                                                          job.topo.dp, job.topo.dp_rank, B));
    model.forward_deferred(mb.inputs, mb.targets, mb.positions, B, T, grad_scale);
    hooks.backward_begin(step, micro);
    model.backward();
    hooks.backward_end(step, micro);
  }
  hooks.reduction_begin(step);
  store.finish_backward();  // the last gradient reductions: backward's tail
  hooks.gradients_final(step);
  double loss = model.take_losses();  // this rank's sum
  job.topo.dp_group->all_reduce_doubles(&loss, 1);
  loss /= tokens;
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
