// The progress line, metrics rows and verdicts of a run (see progress.h).
#include "engine/observe/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "engine/core/log.h"
#include "engine/observe/verdict.h"

namespace zt {

std::string breakdown_shares(const StepResult& r) {
  const double total = std::max(r.step_ms, 1e-9);
  std::string out;
  auto add = [&](const char* name, double ms, bool always) {
    if (!always && ms <= 0) return;
    out += fmt::format("{}{} {:.0f}%", out.empty() ? "" : " ", name, 100 * ms / total);
  };
  add("data", r.data_wait_ms, true);
  add("fwd", r.forward_ms, true);
  add("bwd", r.backward_ms, true);
  add("opt", r.optimizer_ms, true);
  add("comm", r.comm_ms, true);
  add("ckpt", r.checkpoint_ms, false);
  add("offload", r.offload_ms, false);
  add("other", r.other_ms, true);
  return out;
}

namespace {
std::string tokens_short(double t) {
  if (t >= 1e9) return fmt::format("{:.2f}B", t / 1e9);
  if (t >= 1e6) return fmt::format("{:.2f}M", t / 1e6);
  if (t >= 1e3) return fmt::format("{:.1f}k", t / 1e3);
  return fmt::format("{:.0f}", t);
}
}  // namespace

std::string duration_text(double s) {
  const int64_t t = int64_t(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, int(t % 3600 / 60));
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, int(t % 60));
  return fmt::format("{}s", t);
}

Progress::Progress(const RunSpec& spec, int world_size, const Peak& peak, double flops_per_token,
                   const Backend& backend, MetricsWriter* metrics, const Telemetry* telemetry, bool loss_scaling,
                   int64_t start_step, std::function<nlohmann::json(int64_t)> memory_row)
    : spec_(spec),
      world_size_(world_size),
      peak_(peak),
      flops_per_token_(flops_per_token),
      backend_(backend),
      metrics_(metrics),
      telemetry_(telemetry),
      loss_scaling_(loss_scaling),
      start_step_(start_step),
      memory_row_(std::move(memory_row)) {}

double Progress::mfu(double tokens_per_s) const {
  return peak_.tflops > 0 ? tokens_per_s * flops_per_token_ / (peak_.tflops * 1e12 * world_size_) : 0;
}

void Progress::keep_peak_reachable(double tokens_per_s, int64_t step) {
  const double achieved = tokens_per_s * flops_per_token_ / world_size_ / 1e12;  // TFLOP/s per device
  if (peak_.tflops <= 0 || achieved <= peak_.tflops) return;
  if (metrics_ && !peak_raised_)
    spdlog::warn("MFU: step {} ran at {:.3g} TFLOP/s per device, above the peak of {:.3g} ({}): that peak is wrong "
                 "(a start-up probe on a busy machine, or [run] peak_tflops set too low); MFU is judged against the "
                 "fastest rate achieved from now on",
                 step, achieved, peak_.tflops, peak_.source);
  peak_ = {achieved, fmt::format("the fastest rate achieved, step {}", step)};
  peak_raised_ = true;
}

void Progress::step_done(int64_t s, const StepResult& r) {
  const auto& t = spec_.train;
  const double seq_len = double(spec_.model.seq_len);
  if (s > start_step_) mean_step_ms_ += (r.step_ms - mean_step_ms_) / double(s - start_step_);
  keep_peak_reachable(r.tokens_per_s, s + 1);
  const double mfu_now = mfu(r.tokens_per_s);
  for (auto [sum, part] : {std::pair{&interval_.step_ms, r.step_ms}, {&interval_.data_wait_ms, r.data_wait_ms},
                           {&interval_.comm_ms, r.comm_ms}, {&interval_.other_ms, r.other_ms},
                           {&interval_.offload_ms, r.offload_ms}})
    *sum += part;
  ++interval_steps_;
  const int64_t done = s + 1;
  const bool row_due = done % t.log_every == 0 || done == t.max_steps || s == 0;
  if (stragglers && s > start_step_) stragglers->add(r);  // the first step pays for warm-up
  nlohmann::json ranks_row;
  const Verdict straggler = stragglers && row_due ? stragglers->exchange(done, &ranks_row) : Verdict{};
  if (metrics_ && row_due) {
    std::string scaling =
        loss_scaling_ ? fmt::format(" | scale {:g} | skipped {}", r.loss_scale, r.skipped_total) : "";
    const nlohmann::json by_source = tokens_by_source ? tokens_by_source() : nlohmann::json();
    if (by_source.size() > 1) {  // a mixture: the tokens each source has supplied so far
      scaling += " | tokens";
      for (const auto& [name, tokens] : by_source.items())
        scaling += fmt::format(" {} {}", name, tokens_short(tokens.get<double>()));
    }
    if (spec_.data.packing != Packing::None)  // fine-tuning: what the step trained on
      scaling += fmt::format(" | {} docs, {} loss tokens ({:.0f} loss tok/s)", r.documents, tokens_short(double(r.loss_tokens)),
                             r.step_ms > 0 ? double(r.loss_tokens) / (r.step_ms / 1e3) : 0.0);
    if (predicted_step_ms > 0 && mean_step_ms_ > 0) {  // the planner's step beside the measured mean
      const double ratio = mean_step_ms_ / predicted_step_ms;  // no exponent: "32500x", not "3.25e+04x"
      scaling += fmt::format(" | plan {:.3g} ms, measured {}x", predicted_step_ms,
                             ratio < 100 ? fmt::format("{:.2f}", ratio) : fmt::format("{:.0f}", ratio));
    }
    const double left_s = (mean_step_ms_ > 0 ? mean_step_ms_ : r.step_ms) * double(t.max_steps - done) / 1e3;
    std::printf("step %lld/%lld | loss %.4f | lr %.3e | grad_norm %s | %.0f tok/s | MFU %.1f%% | %.1f ms (%s)%s | "
                "left %s\n",
                (long long)done, (long long)t.max_steps, r.loss, r.lr,
                r.skipped ? (r.skip_reason.empty() ? std::string("overflow (step skipped)")
                                                   : "step skipped: " + r.skip_reason).c_str()
                          : fmt::format("{:.4f}", r.grad_norm).c_str(), r.tokens_per_s,
                100 * mfu_now, r.step_ms, breakdown_shares(r).c_str(), scaling.c_str(), duration_text(left_s).c_str());
    std::fflush(stdout);
    nlohmann::json rec = {{"kind", "train"}, {"step", done}, {"loss", r.loss}, {"lr", r.lr},
                          {"grad_norm", std::isfinite(r.grad_norm) ? nlohmann::json(r.grad_norm) : nlohmann::json()},
                          {"tokens_per_s", r.tokens_per_s}, {"mfu", mfu_now}, {"step_ms", r.step_ms},
                          {"data_wait_ms", r.data_wait_ms}, {"forward_ms", r.forward_ms},
                          {"backward_ms", r.backward_ms}, {"optimizer_ms", r.optimizer_ms},
                          {"comm_ms", r.comm_ms}, {"checkpoint_ms", r.checkpoint_ms},
                          {"offload_ms", r.offload_ms}, {"other_ms", r.other_ms}, {"eta_s", left_s}};
    if (!by_source.is_null()) rec["tokens_by_source"] = by_source;
    if (spec_.data.packing != Packing::None) {
      rec["loss_tokens"] = r.loss_tokens;
      rec["documents"] = r.documents;
      rec["loss_tokens_per_s"] = r.step_ms > 0 ? double(r.loss_tokens) / (r.step_ms / 1e3) : 0.0;
    }
    if (r.comm_ms > 0) rec["comm_ms_by_group"] = r.comm_ms_by_group;
    if (predicted_step_ms > 0) rec["predicted_step_ms"] = predicted_step_ms;
    if (loss_scaling_) rec["loss_scale"] = r.loss_scale;
    if (loss_scaling_ || r.skipped_total > 0) {
      rec["skipped"] = r.skipped;
      rec["skipped_steps"] = r.skipped_total;
    }
    metrics_->write(rec);
    metrics_->write(memory_row_(done));
    if (!ranks_row.is_null() && s > start_step_) metrics_->write(ranks_row);
    if (s > start_step_) {  // the first step pays for warm-up (the first shard, first touches)
      const MemoryStats ms = backend_.memory_stats();
      const size_t avail = backend_.memory_available();
      const double limit = avail == SIZE_MAX ? 0 : double(avail) + double(ms.allocated);
      const double interval_mfu =
          peak_.tflops > 0 && interval_.step_ms > 0
              ? mfu(double(interval_steps_) * double(t.global_batch) * seq_len / (interval_.step_ms / 1e3))
              : -1;
      const Verdict v = !straggler.kind.empty()
                            ? straggler
                            : judge(interval_, ms, limit, spec_, telemetry_ ? telemetry_->signals() : DeviceSignals{},
                                    interval_mfu, slow_source ? slow_source() : std::string());
      // One interval's hiccup (a scheduler stall, a page-cache miss) is not a verdict: the same
      // kind (and subject: the same rank) must hold over two log intervals in a row before it is
      // reported.
      const std::string judged = v.kind + v.subject;
      const bool confirmed = !v.kind.empty() && judged == last_judged_;
      if (confirmed && judged != last_verdict_) spdlog::warn("{}", v.line());
      if (confirmed) {
        nlohmann::json row = {{"kind", "verdict"}, {"step", done}, {"verdict", v.kind}, {"evidence", v.evidence},
                              {"knob", v.knob}};
        if (!v.subject.empty()) row["subject"] = v.subject;
        metrics_->write(row);
      }
      last_verdict_ = confirmed ? judged : std::string();
      last_judged_ = judged;
    }
  }
  if (done % t.log_every == 0 || done == t.max_steps || s == start_step_) interval_ = StepResult{}, interval_steps_ = 0;
}

}  // namespace zt
