// The step breakdown (see step_breakdown.h).
#include "engine/observe/step_breakdown.h"

#include <algorithm>

#include <fmt/format.h>

namespace zt {

namespace {
double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

StepBreakdown::StepBreakdown(Backend& be, std::vector<Comm*> groups, OffloadClock& offload, StepTrace* trace)
    : be_(be), groups_(std::move(groups)), offload_(offload), trace_(trace) {}

StepBreakdown::~StepBreakdown() {
  if (traced_) observe_waits(0, false);
}

StepBreakdown::Mark StepBreakdown::mark(bool timed) {
  Mark m;
  m.point = timed ? be_.timing_point() : 0;
  for (Comm* g : groups_) m.comm.push_back(g->wait_point());
  m.offload = offload_.waited_ms();
  return m;
}

double StepBreakdown::comm_between(const Mark& a, const Mark& b) const {
  double ms = 0;
  for (size_t i = 0; i < groups_.size(); ++i) ms += groups_[i]->exposed_ms(a.comm[i], b.comm[i]);
  return ms;
}

void StepBreakdown::observe_waits(int64_t step, bool on) {
  // each blocking wait on a collective, and each blocking offload transfer or NVMe wait, on a
  // track of its own
  for (Comm* g : groups_)
    g->set_wait_observer(!on ? Comm::WaitObserver() : [this, step, g](const char* what, auto start, double ms) {
      trace_->add(fmt::format("{} {}", g->name(), what), step, ms_between(trace_origin_, start), ms, 2);
    });
  offload_.set_observer(!on ? OffloadClock::Observer() : [this, step](const char* what, auto start, double ms) {
    trace_->add(fmt::format("offload {}", what), step, ms_between(trace_origin_, start), ms, 3);
  });
}

void StepBreakdown::data_wait(std::chrono::steady_clock::time_point start, std::chrono::steady_clock::time_point end,
                              double blocked_ms) {
  data_blocked_ms_ += blocked_ms;
  if (traced_) data_spans_.push_back({ms_between(host_start_, start), ms_between(start, end)});
}

void StepBreakdown::step_begin(int64_t step) {
  fwd_.clear(), bwd_.clear(), data_spans_.clear();
  data_blocked_ms_ = 0;
  host_start_ = std::chrono::steady_clock::now();
  traced_ = trace_ && trace_->wants(step);
  if (traced_ && trace_origin_ == std::chrono::steady_clock::time_point{}) trace_origin_ = host_start_;
  start_point_ = be_.timing_point();
  if (traced_) observe_waits(step, true);
}

void StepBreakdown::forward_begin(int64_t, int64_t micro) {
  timed_ = 2 * micro + 8 < Backend::kTimingPoints;  // beyond: counted in "other"
  if (timed_) open_ = mark();
  be_.push_range("forward");
}

void StepBreakdown::backward_begin(int64_t, int64_t) {
  be_.pop_range();
  if (timed_) {
    const Mark m = mark();
    fwd_.push_back({"forward", open_, m});
    open_ = m;
  }
  be_.push_range("backward");
}

void StepBreakdown::backward_end(int64_t, int64_t) {
  be_.pop_range();
  if (timed_) bwd_.push_back({"backward", open_, mark()});
}

void StepBreakdown::reduction_begin(int64_t) {
  open_ = mark();
  be_.push_range("gradient reduction");
}

void StepBreakdown::optimizer_begin(int64_t) {
  be_.pop_range();
  const Mark m = mark();
  bwd_.push_back({"gradient reduction + loss", open_, m});
  optimizer_.from = m;
  be_.push_range("optimizer");
}

void StepBreakdown::optimizer_end(int64_t) {
  be_.pop_range();
  optimizer_.to = mark();
}

void StepBreakdown::step_end(int64_t step, StepResult& r) {
  r.step_ms = ms_between(host_start_, std::chrono::steady_clock::now());
  r.data_wait_ms = data_blocked_ms_;
  // Exposed communication and offload waits are taken out of the phase they blocked (phases are
  // never negative: on a GPU the host's blocked time and the device's phase times are different
  // clocks).
  auto net = [&](const Phase& x) {
    double comm = 0;
    for (size_t i = 0; i < groups_.size(); ++i) {  // by group, named as made ("dp", not "dp(nccl)")
      const double ms = groups_[i]->exposed_ms(x.from.comm[i], x.to.comm[i]);
      const std::string name = groups_[i]->name();
      r.comm_ms_by_group[name.substr(0, name.find('('))] += ms;
      comm += ms;
    }
    const double offload = x.to.offload - x.from.offload;
    r.comm_ms += comm, r.offload_ms += offload;
    return std::max(0.0, be_.timing_ms(x.from.point, x.to.point) - comm - offload);
  };
  for (const Phase& x : fwd_) r.forward_ms += net(x);
  for (const Phase& x : bwd_) r.backward_ms += net(x);
  r.optimizer_ms = net(optimizer_);
  r.other_ms = std::max(0.0, r.step_ms - r.data_wait_ms - r.forward_ms - r.backward_ms - r.optimizer_ms - r.comm_ms -
                                 r.offload_ms);
  if (!traced_) return;
  const double base = ms_between(trace_origin_, host_start_);
  auto add = [&](const Phase& x) {
    trace_->add(x.name, step, base + be_.timing_ms(start_point_, x.from.point), be_.timing_ms(x.from.point, x.to.point),
                0, comm_between(x.from, x.to));
  };
  for (const Phase& x : fwd_) add(x);
  for (const Phase& x : bwd_) add(x);
  add(optimizer_);
  for (const auto& [start, dur] : data_spans_) trace_->add("data wait", step, base + start, dur, 1);
  observe_waits(step, false);
  traced_ = false;
  trace_->finish_step(step);
}

}  // namespace zt
