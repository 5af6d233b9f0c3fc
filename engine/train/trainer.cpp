// The training loop (see trainer.h).
#include "engine/train/trainer.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "data/tokenizer/tokenizer.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/core/timer.h"
#include "engine/optim/schedule.h"
#include "engine/train/metrics.h"
#include "engine/train/sampler.h"

namespace zt {

namespace {

GPT2Config model_config(const RunSpec& s) {
  return {int(s.model.n_layer), int(s.model.n_head), int(s.model.d_model), int(s.model.d_ff),
          int(s.model.vocab_size), int(s.model.seq_len)};
}

void write_text_atomic(const std::filesystem::path& path, const std::string& text) {
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f) throw RuntimeFailure(fmt::format("{}: write failed", tmp));
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace

Trainer::Trainer(const RunSpec& spec) : spec_(spec) {
  const auto& m = spec.model;
  train_ = std::make_unique<data::TokenDataset>(spec.data.train, int(m.seq_len), int(m.vocab_size));
  if (!spec.data.val.empty())
    val_ = std::make_unique<data::TokenDataset>(spec.data.val, int(m.seq_len), int(m.vocab_size));
  train_order_ = std::make_unique<data::SampleOrder>(*train_, uint64_t(spec.run.seed), true);
  backend_ = make_backend(spec.run.device, int(spec.run.threads));
  model_ = std::make_unique<GPT2>(model_config(spec), *backend_, int(spec.train.micro_batch));
  model_->init_params(uint64_t(spec.run.seed));
  optim_ = std::make_unique<AdamW>(spec.optim, *backend_, model_->num_params());
  inputs_.resize(size_t(spec.train.micro_batch * m.seq_len));
  targets_.resize(inputs_.size());
}

Trainer::~Trainer() = default;

StepResult Trainer::step(int64_t step) {
  Timer timer;
  const int B = int(spec_.train.micro_batch), T = int(spec_.model.seq_len);
  const int64_t accum = spec_.train.global_batch / spec_.train.micro_batch;
  // Each micro-batch contributes mean-loss / accum, so the gradient is that of the mean over the
  // global batch.
  const float grad_scale = 1.0f / float(int64_t(B) * T * accum);
  model_->zero_grad();
  double loss_sum = 0;
  for (int64_t micro = 0; micro < accum; ++micro) {
    train_order_->fill(uint64_t(step * spec_.train.global_batch + micro * B), B, inputs_.data(),
                       targets_.data());
    if (on_batch) on_batch(inputs_.data(), targets_.data());
    loss_sum += model_->forward(inputs_.data(), targets_.data(), B, T, grad_scale);
    model_->backward();
  }
  StepResult r;
  r.step = step;
  r.loss = float(loss_sum / double(accum));
  r.grad_norm = optim_->clip(model_->grad_data(), model_->num_params(), spec_.optim.grad_clip);
  r.lr = lr_at(spec_.optim, step, spec_.train.max_steps);
  optim_->step(model_->param_data(), model_->grad_data(), model_->params(), r.lr, int(step + 1));
  backend_->synchronize();
  r.step_ms = timer.ms();
  r.tokens_per_s = double(spec_.train.global_batch) * T / (r.step_ms / 1e3);
  return r;
}

float Trainer::evaluate() {
  ZT_CHECK(val_ != nullptr, "evaluate() without [data] val");
  const int B = int(spec_.train.micro_batch), T = int(spec_.model.seq_len);
  data::SampleOrder order(*val_, 0, /*shuffle=*/false);
  double sum = 0;
  for (int64_t i = 0; i < spec_.train.eval_steps; ++i) {
    order.fill(uint64_t(i * B), B, inputs_.data(), targets_.data());
    sum += model_->forward(inputs_.data(), targets_.data(), B, T, 0.0f);
  }
  return float(sum / double(spec_.train.eval_steps));
}

void Trainer::run() {
  namespace fs = std::filesystem;
  const auto& t = spec_.train;
  fs::create_directories(spec_.run.out_dir);
  write_text_atomic(fs::path(spec_.run.out_dir) / "config.resolved.toml", resolved_toml(spec_));
  MetricsWriter metrics(spec_.run.out_dir);
  const auto& m = spec_.model;
  spdlog::info("run '{}': gpt2 {} layers, d_model {}, {} heads, seq_len {}, vocab {}: {:.2f}M parameters",
               spec_.run.name, m.n_layer, m.d_model, m.n_head, m.seq_len, m.vocab_size,
               model_->num_params() / 1e6);
  spdlog::info("data: {} ({} tokens, {} samples of {}); batch {} x {} micro-batches; {} steps",
               spec_.data.train, train_->manifest().total_tokens(), train_->n_windows(), m.seq_len,
               t.micro_batch, t.global_batch / t.micro_batch, t.max_steps);
  const MemoryStats mem = backend_->memory_stats();
  spdlog::info("memory: {:.1f} MiB allocated (params + grads + AdamW states {:.1f} MiB)",
               mem.allocated / 1048576.0, 4.0 * model_->num_params() * 4 / 1048576.0);

  auto do_eval = [&](int64_t step) {
    if (!val_) return;
    const float vl = evaluate();
    std::printf("step %lld | val_loss %.4f\n", (long long)step, vl);
    std::fflush(stdout);
    metrics.write({{"kind", "eval"}, {"step", step}, {"val_loss", vl}});
  };
  for (int64_t s = 0; s < t.max_steps; ++s) {
    const StepResult r = step(s);
    if (!std::isfinite(r.loss))
      throw RuntimeFailure(fmt::format("step {}: loss is {} (diverged); lower [optim] lr", s + 1, r.loss));
    const int64_t done = s + 1;
    if (done % t.log_every == 0 || done == t.max_steps || s == 0) {
      std::printf("step %lld/%lld | loss %.4f | lr %.3e | grad_norm %.4f | %.0f tok/s | %.1f ms\n",
                  (long long)done, (long long)t.max_steps, r.loss, r.lr, r.grad_norm,
                  r.tokens_per_s, r.step_ms);
      std::fflush(stdout);
      metrics.write({{"kind", "train"}, {"step", done}, {"loss", r.loss}, {"lr", r.lr},
                     {"grad_norm", r.grad_norm}, {"tokens_per_s", r.tokens_per_s},
                     {"step_ms", r.step_ms}});
    }
    if (t.eval_every > 0 && done % t.eval_every == 0 && done != t.max_steps) do_eval(done);
  }
  do_eval(t.max_steps);

  if (t.sample_tokens > 0) {
    const auto& info = train_->manifest().tokenizer;
    std::optional<data::Tokenizer> tok;
    if (info.kind == "byte") tok = data::Tokenizer::byte_level();
    else if (!info.vocab_file.empty() && fs::exists(info.vocab_file))
      tok = data::Tokenizer::from_tiktoken(info.vocab_file);
    const auto out = generate(*model_, *backend_, {info.eot}, int(t.sample_tokens),
                              t.sample_temperature, info.n_vocab, uint64_t(spec_.run.seed));
    std::vector<uint32_t> gen(out.begin() + 1, out.end());
    std::printf("---- sample (%lld tokens, temperature %.2f) ----\n", (long long)t.sample_tokens,
                t.sample_temperature);
    if (tok) {
      std::string text = tok->decode(gen);
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else {
      for (auto id : gen) std::printf("%u ", id);
    }
    std::printf("\n---- end of sample ----\n");
    std::fflush(stdout);
  }
  spdlog::info("done: metrics in {}", metrics.path());
}

}  // namespace zt
