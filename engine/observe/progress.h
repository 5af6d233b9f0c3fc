// What a training run tells its user as it goes: the progress line, metrics.jsonl's train,
// memory and verdict rows, and the verdict itself (judged over each log interval, reported once
// the same kind holds over two intervals in a row). The trainer hands it each step's result.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/backend/backend.h"
#include "engine/config/spec.h"
#include "engine/observe/metrics.h"
#include "engine/observe/step_result.h"
#include "engine/observe/straggler.h"
#include "engine/observe/telemetry.h"
#include "engine/observe/throughput.h"

namespace zt {

// "data 2% fwd 31% bwd 55% opt 7% comm 3% other 2%": where the step's time went (checkpoint and
// offload shares only when present).
std::string breakdown_shares(const StepResult& r);
// 3725 s -> "1h02m", 95 s -> "1m35s", 7 s -> "7s"
std::string duration_text(double s);

class Progress {
 public:
  // metrics: rank 0's metrics.jsonl (null on the other ranks, which report nothing);
  // telemetry: rank 0's device signals for the verdict (may be null); memory_row(step): a
  // metrics row of kind "memory"; the run continues a launch from step start_step.
  Progress(const RunSpec& spec, int world_size, const Peak& peak, double flops_per_token, const Backend& backend,
           MetricsWriter* metrics, const Telemetry* telemetry, bool loss_scaling, int64_t start_step,
           std::function<nlohmann::json(int64_t)> memory_row);

  // The job's model FLOPs utilization at tokens_per_s, against each device's peak.
  double mfu(double tokens_per_s) const;
  // After step s (0-based): prints and writes what is due at this step.
  void step_done(int64_t s, const StepResult& r);
  // Cumulative tokens per training source ({"name": tokens}), read at each log row: into the
  // metrics row, and onto the progress line when there are several sources.
  std::function<nlohmann::json()> tokens_by_source;
  // With several sources: which one the loader spent its time on since the last call ("" else).
  std::function<std::string()> slow_source;
  // With several ranks: every rank's phases exchanged at each log row, for the straggler verdict
  // (which goes before the others: a straggler makes the rest look communication-bound). Every
  // rank then calls step_done at every step.
  StragglerWatch* stragglers = nullptr;
  // The planner's step time for this layout on this GPU's machine profile (0: none): each log
  // line shows it beside the measured mean, with their ratio.
  double predicted_step_ms = 0;

 private:
  // No MFU above 100%: a peak below the rate a step achieved was wrong (the CPU's start-up probe
  // on a busy machine, a [run] peak_tflops too low); it is raised to that rate, and said once.
  void keep_peak_reachable(double tokens_per_s, int64_t step);

  const RunSpec& spec_;
  int world_size_;
  Peak peak_;
  bool peak_raised_ = false;
  double flops_per_token_;
  const Backend& backend_;
  MetricsWriter* metrics_;
  const Telemetry* telemetry_;
  bool loss_scaling_;
  int64_t start_step_;
  std::function<nlohmann::json(int64_t)> memory_row_;
  StepResult interval_;                    // the breakdown summed since the last log line, for the verdict
  int64_t interval_steps_ = 0;
  std::string last_judged_, last_verdict_;  // the previous interval's judgement; the verdict last reported
  double mean_step_ms_ = 0;                // for the time left: mean over this launch's steps after the first
};

}  // namespace zt
