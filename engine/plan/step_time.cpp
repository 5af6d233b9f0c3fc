// The step's timeline priced on a machine (see step_time.h).
#include "engine/plan/step_time.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include <fmt/format.h>

namespace zt {

Calibration default_calibration() {
  // bench/calibration/h200.json (tools/gpu_check.sh on an H200, 2026-12-04, datasheet 989 TFLOP/s
  // bf16 and 4.8 TB/s): GPT-2 124M's five GEMM shapes at 605.9-725.3 TFLOP/s (mean 650.6), ztrain's
  // attention kernels at head size 64 and 128, T 1024 and 4096 (154.1 / 115.4 TFLOP/s forward /
  // backward at 64, 1024), device copies at 3,818 GB/s. The fp32 fraction is not measured: taken
  // as the memory's.
  Calibration c;
  c.gemm = 650.6 / 989;
  c.attention = {{64, 1024, 154.09 / 989, 115.43 / 989},
                 {128, 1024, 128.35 / 989, 108.17 / 989},
                 {64, 4096, 191.39 / 989, 153.02 / 989},
                 {128, 4096, 154.23 / 989, 140.27 / 989}};
  c.memory = 3818e9 / 4.8e12;
  c.vector = c.memory;
  c.source = "bench/calibration/h200.json (measured on an H200)";
  return c;
}

Calibration::Attention Calibration::attention_at(int hs, int T) const {
  Attention best;
  double best_score = 1e300;
  for (const Attention& a : attention) {
    // a head size not measured counts as a factor of 4 in T; 0 (a figure for every shape) matches
    const double score = (a.seq_len > 0 ? std::abs(std::log(double(std::max(T, 1)) / a.seq_len)) : 0) +
                         (a.head_size == hs || a.head_size == 0 ? 0 : std::log(4.0));
    if (score < best_score || (score == best_score && a.seq_len > best.seq_len)) best = a, best_score = score;
  }
  return best;
}

namespace {

bool is_attention(const PlanBackend::Op& op) {
  return std::strncmp(op.name, "attention_forward", 17) == 0 || std::strncmp(op.name, "attention_backward", 18) == 0;
}

double op_seconds(const PlanBackend::Op& op, const DeviceSpec& gpu, const Calibration& c) {
  double rate = gpu.vector_tflops * 1e12 * c.vector;
  if (op.matrix) {
    double eff = c.gemm;
    const bool forward = std::strncmp(op.name, "attention_forward", 17) == 0;
    if (is_attention(op)) {
      const Calibration::Attention a = c.attention_at(op.head_size, op.seq_len);
      eff = forward ? a.forward : a.backward;
      if (eff <= 0) eff = c.gemm;  // no attention measured: as the GEMMs
    }
    rate = gpu.tflops * 1e12 * eff;
    if (op.fp8 && gpu.fp8_tflops > 0) rate = gpu.fp8_tflops * 1e12 * (c.fp8_gemm > 0 ? c.fp8_gemm : c.gemm);
  }
  return std::max(op.flops / rate, op.bytes / (gpu.bytes_per_s * c.memory));
}

}  // namespace

StepTime price_step(const std::vector<PlanBackend::Op>& ops, const std::vector<PlanBackend::Collective>& collectives,
                    const MachineProfile& machine, const Calibration& cal, bool async) {
  StepTime t;
  std::vector<double> end(collectives.size()), seconds(collectives.size());
  std::vector<std::string> what(collectives.size());
  std::map<std::string, double> stalled;
  double now = 0;
  std::map<std::string, double> comm_free;  // each group's communication stream
  auto start = [&](size_t j) {
    double& free_at = comm_free[collectives[j].group];
    end[j] = std::max(now, free_at) + seconds[j];
    free_at = end[j];
  };
  int world = 1;  // the job's ranks: its widest group's span
  for (const PlanBackend::Collective& c : collectives) world = std::max(world, c.size * c.stride);
  auto issue = [&](size_t j) {
    const PlanBackend::Collective& c = collectives[j];
    const Link link = group_link(c.size, c.stride, machine, world);
    seconds[j] = collective_seconds(c.kind, c.bytes, c.size, link);
    t.comm_s += seconds[j];
    t.groups[c.group].seconds += seconds[j];
    t.groups[c.group].kind_seconds[collective_name(c.kind)] += seconds[j];
    end[j] = -1;  // started below: now, or (no progress of its own) when waited for
    if (async) start(j);
    what[j] = fmt::format("{} over {} ({} ranks, {})", collective_name(c.kind), c.group, c.size, link.name);
  };
  auto wait = [&](size_t j) {
    if (end[j] < 0) start(j);
    if (end[j] > now) {
      stalled[what[j]] += end[j] - now;
      t.groups[collectives[j].group].stalled += end[j] - now;
      now = end[j];
    }
  };
  // Between two ops, the issues and waits there in the order the step made them.
  size_t next = 0;  // the next collective to issue
  std::vector<std::vector<size_t>> waits_at(ops.size() + 1);  // the collectives first waited for before op i
  for (size_t j = 0; j < collectives.size(); ++j)
    if (collectives[j].waited_at >= 0 && size_t(collectives[j].waited_at) <= ops.size())
      waits_at[collectives[j].waited_at].push_back(j);
  std::vector<std::tuple<uint64_t, bool, size_t>> events;  // (sequence, a wait, collective)
  auto between_ops = [&](size_t op) {
    events.clear();
    for (; next < collectives.size() && collectives[next].issued_at <= op; ++next)
      events.push_back({collectives[next].issue_seq, false, next});
    for (const size_t j : waits_at[op])
      if (j < next) events.push_back({collectives[j].wait_seq, true, j});
    std::sort(events.begin(), events.end());  // a collective's issue comes before its wait
    for (const auto& [seq, waited, j] : events) waited ? wait(j) : issue(j);
  };
  for (size_t i = 0; i <= ops.size(); ++i) {
    between_ops(i);
    if (i == ops.size()) break;
    const double s = op_seconds(ops[i], machine.gpu, cal);
    StepTime::Kind& kind = is_attention(ops[i]) ? t.attention : ops[i].matrix ? t.gemm : t.other;
    kind.seconds += s, kind.flops += ops[i].flops, kind.bytes += ops[i].bytes;
    t.compute_s += s;
    now += s;
  }
  for (size_t j = 0; j < collectives.size(); ++j) {  // the step ends when its last collective has
    if (collectives[j].waited_at < 0) wait(j);
  }
  t.step_s = now;
  for (const auto& [w, s] : stalled) t.stalls.push_back({w, s});
  std::sort(t.stalls.begin(), t.stalls.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  return t;
}

}  // namespace zt
