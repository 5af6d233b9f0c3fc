// dump-state for parity tests (layout in dump_state.h).
#include "engine/train/dump_state.h"

#include <vector>

#include "engine/checkpoint/h5_file.h"
#include "engine/core/log.h"
#include "engine/train/trainer.h"

namespace zt {

namespace {
void write_tensors(H5File& f, const std::string& group, GPT2& model, Backend& be, const float* buf) {
  std::vector<float> host(model.num_params());
  be.copy_to_host(host.data(), buf, host.size() * sizeof(float));
  for (const auto& p : model.params()) f.write(group + "/" + p.name, host.data() + p.offset, p.shape);
}
void write_scalar(H5File& f, const std::string& name, double v) { f.write(name, &v, {}); }
}  // namespace

void dump_state(const RunSpec& spec, const std::string& out_path, int train_steps) {
  Trainer trainer(spec);
  GPT2& model = trainer.model();
  Backend& be = trainer.backend();
  const int B = int(spec.train.micro_batch), T = int(spec.model.seq_len);
  H5File f(out_path, H5File::Mode::Create);

  const auto& m = spec.model;
  const auto& o = spec.optim;
  const double schedule = o.schedule == "cosine" ? 0 : o.schedule == "linear" ? 1 : 2;
  const std::pair<const char*, double> config[] = {
      {"n_layer", double(m.n_layer)}, {"n_head", double(m.n_head)}, {"d_model", double(m.d_model)},
      {"d_ff", double(m.d_ff)}, {"vocab_size", double(m.vocab_size)}, {"seq_len", double(m.seq_len)},
      {"lr", o.lr}, {"min_lr", o.min_lr}, {"warmup_steps", double(o.warmup_steps)},
      {"schedule", schedule}, {"weight_decay", o.weight_decay}, {"beta1", o.beta1},
      {"beta2", o.beta2}, {"eps", o.eps}, {"grad_clip", o.grad_clip},
      {"max_steps", double(spec.train.max_steps)}, {"micro_batch", double(B)},
      {"global_batch", double(spec.train.global_batch)}};
  for (const auto& [k, v] : config) write_scalar(f, std::string("/config/") + k, v);

  write_tensors(f, "/params", model, be, model.param_data());
  std::vector<int32_t> inputs(size_t(B) * T), targets(inputs.size());
  trainer.train_order().fill(0, B, inputs.data(), targets.data());
  f.write("/batch/inputs", inputs.data(), {B, T});
  f.write("/batch/targets", targets.data(), {B, T});
  model.zero_grad();
  const float loss = model.forward(inputs.data(), targets.data(), B, T, 1.0f / float(B * T));
  model.backward();
  f.write("/out/loss", &loss, {});
  write_tensors(f, "/grads", model, be, model.grad_data());
  spdlog::info("dump-state: loss {:.6f} at initialization", loss);

  if (train_steps > 0) {
    const int64_t GB = spec.train.global_batch;
    std::vector<int32_t> all_in, all_tgt;
    trainer.on_batch = [&](const int32_t* in, const int32_t* tgt) {
      all_in.insert(all_in.end(), in, in + size_t(B) * T);
      all_tgt.insert(all_tgt.end(), tgt, tgt + size_t(B) * T);
    };
    std::vector<double> losses, lrs, norms;
    for (int s = 0; s < train_steps; ++s) {
      const StepResult r = trainer.step(s);
      losses.push_back(r.loss);
      lrs.push_back(r.lr);
      norms.push_back(r.grad_norm);
    }
    f.write("/train/inputs", all_in.data(), {train_steps, GB, T});
    f.write("/train/targets", all_tgt.data(), {train_steps, GB, T});
    f.write("/train/loss", losses.data(), {train_steps});
    f.write("/train/lr", lrs.data(), {train_steps});
    f.write("/train/grad_norm", norms.data(), {train_steps});
    write_tensors(f, "/final", model, be, model.param_data());
    spdlog::info("dump-state: {} training steps, final loss {:.6f}", train_steps, losses.back());
  }
  f.close();
  spdlog::info("dump-state: wrote {}", out_path);
}

}  // namespace zt
