// dump-state for parity tests (layout in dump_state.h).
#include "engine/train/dump_state.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "engine/checkpoint/h5_file.h"
#include "engine/core/log.h"
#include "engine/optim/loss_scaler.h"
#include "engine/train/trainer.h"

namespace zt {

namespace {
// `flat`: host vector in the unsharded model's flat layout (ParamStore::full_params / full_grads).
void write_tensors(H5File* f, const std::string& group, const ParamTable& table, const std::vector<float>& flat) {
  if (!f) return;
  for (const auto& p : table.params())
    f->write(group + "/" + p.name, flat.data() + p.global_offset, p.stored_shape);  // real rows only
}
void write_scalar(H5File* f, const std::string& name, double v) {
  if (f) f->write(name, &v, {});
}
}  // namespace

void dump_state(const RunSpec& spec, const std::string& out_path, int train_steps) {
  Trainer trainer(spec);
  Model& model = trainer.model();
  ParamStore& store = trainer.store();  // what trains: the model's weights, or with [lora] the adapters
  ParamStore& weights = trainer.job().weights();  // the model's weights (frozen with [lora])
  const ParamTable& trained = trainer.job().trained_table();
  const ParamTable* adapters = model.adapter_table();
  const int B = int(spec.train.micro_batch), T = int(spec.model.seq_len);
  // Every rank takes part (the states may be sharded); rank 0 writes the file.
  std::unique_ptr<H5File> file;
  if (trainer.topology().is_root()) file = std::make_unique<H5File>(out_path, H5File::Mode::Create);
  H5File* f = file.get();

  if (trainer.topology().is_root()) spdlog::info("dump-state: data {}", trainer.data().describe());
  const auto& m = spec.model;
  const auto& o = spec.optim;
  const double schedule = double(o.schedule);  // 0 cosine, 1 linear, 2 constant
  const std::pair<const char*, double> config[] = {
      {"n_layer", double(m.n_layer)}, {"n_head", double(m.n_head)}, {"d_model", double(m.d_model)},
      {"d_ff", double(m.d_ff)}, {"vocab_size", double(m.vocab_size)}, {"seq_len", double(m.seq_len)},
      {"lr", o.lr}, {"min_lr", o.min_lr}, {"warmup_steps", double(o.warmup_steps)},
      {"schedule", schedule}, {"weight_decay", o.weight_decay}, {"beta1", o.beta1},
      {"beta2", o.beta2}, {"eps", o.eps}, {"grad_clip", o.grad_clip},
      {"max_steps", double(spec.train.max_steps)}, {"micro_batch", double(B)},
      {"global_batch", double(spec.train.global_batch)}};
  for (const auto& [k, v] : config) write_scalar(f, std::string("/config/") + k, v);

  // With adapters, /params and /compute hold the frozen weights and the adapters alike.
  write_tensors(f, "/params", model.table(), weights.full_params());
  if (adapters) write_tensors(f, "/params", *adapters, store.full_params());
  // Mixed precision: the compute copy, as the model reads it (evidence that it is 16-bit).
  const std::vector<float> compute = weights.full_compute_params();
  if (!compute.empty()) write_tensors(f, "/compute", model.table(), compute);
  if (adapters && !compute.empty()) write_tensors(f, "/compute", *adapters, store.full_compute_params());
  std::vector<int32_t> inputs(size_t(B) * T), targets(inputs.size()), positions(inputs.size());
  data::MixedData& mixed = trainer.data().mixed();
  data::MixReader(mixed, mixed.schedule.start()).fill(0, B, inputs.data(), targets.data(), nullptr, positions.data());
  const bool packed = spec.data.packing != Packing::None;
  const int32_t* pos = packed ? positions.data() : nullptr;
  if (f) f->write("/batch/inputs", inputs.data(), {B, T});
  if (f) f->write("/batch/targets", targets.data(), {B, T});
  if (f && packed) f->write("/batch/positions", positions.data(), {B, T});
  // Every data-parallel rank computes the same batch; scaling by 1/D makes the reduced gradient
  // that of one process. The loss is the mean over the tokens with loss (targets >= 0).
  // fp16 scales the loss gradient as training does (the loss scaler's starting scale), so that
  // small gradients survive fp16's range, and divides the fp32 gradients by it again.
  const int D = trainer.topology().dp;
  const LossScaler scaler(spec.precision, trainer.backend().compute_dtype());
  store.zero_grad();
  store.set_last_micro_batch(true);
  const double counted = double(std::max<int64_t>(1, loss_tokens(targets.data(), int64_t(B) * T)));
  model.set_batch_origin(uint64_t(spec.run.seed), 0);  // as the first step's first micro-batch (one rank)
  const float loss = model.forward(inputs.data(), targets.data(), B, T, float(scaler.scale() / (counted * D)), pos);
  model.backward();
  store.finish_backward();
  if (f) f->write("/out/loss", &loss, {});
  std::vector<float> grads = store.full_grads();
  for (float& g : grads) g = float(double(g) / scaler.scale());
  write_tensors(f, "/grads", trained, grads);  // what trains: a frozen weight has none
  // The logits of the last position of each sequence, as the model stores them (compute
  // precision), from a forward without targets (the one above replaced them by their gradient).
  model.forward(inputs.data(), nullptr, B, T, 0.0f, pos);
  const int V = model.vocab_size();
  std::vector<float> logits(size_t(B) * V);
  for (int b = 0; b < B; ++b) model.logits_row(b, T - 1, logits.data() + size_t(b) * V);
  if (f) f->write("/out/logits", logits.data(), {B, V});
  spdlog::info("dump-state: loss {:.6f} at initialization", loss);

  if (train_steps > 0) {
    const int64_t GB = spec.train.global_batch;
    std::vector<int32_t> all_in, all_tgt, all_pos;
    trainer.on_batch = [&](const MicroBatch& mb) {
      all_in.insert(all_in.end(), mb.inputs, mb.inputs + size_t(B) * T);
      all_tgt.insert(all_tgt.end(), mb.targets, mb.targets + size_t(B) * T);
      if (mb.positions) all_pos.insert(all_pos.end(), mb.positions, mb.positions + size_t(B) * T);
    };
    std::vector<double> losses, lrs, norms;
    for (int s = 0; s < train_steps; ++s) {
      const StepResult r = trainer.step(s);
      losses.push_back(r.loss);
      lrs.push_back(r.lr);
      norms.push_back(r.grad_norm);
    }
    // This rank saw its data-parallel slice; the file records the global batches (rank 0 with
    // D = 1 is the common case for parity tests).
    if (f && D == 1) {
      f->write("/train/inputs", all_in.data(), {train_steps, GB, T});
      f->write("/train/targets", all_tgt.data(), {train_steps, GB, T});
      if (!all_pos.empty()) f->write("/train/positions", all_pos.data(), {train_steps, GB, T});
    }
    if (f) f->write("/train/loss", losses.data(), {train_steps});
    if (f) f->write("/train/lr", lrs.data(), {train_steps});
    if (f) f->write("/train/grad_norm", norms.data(), {train_steps});
    write_tensors(f, "/final", model.table(), weights.full_params());  // frozen: as at the start
    if (adapters) write_tensors(f, "/final", *adapters, store.full_params());
    spdlog::info("dump-state: {} training steps, final loss {:.6f}", train_steps, losses.back());
  }
  if (f) {
    f->close();
    spdlog::info("dump-state: wrote {}", out_path);
  }
}

}  // namespace zt
