// The Chrome trace of [run] trace_steps (see trace.h).
#include "engine/observe/trace.h"

#include <cstdio>

#include "engine/core/atomic_file.h"
#include "engine/core/status.h"

namespace zt {

StepTrace::StepTrace(const std::string& range, int rank, std::string path) : rank_(rank), path_(std::move(path)) {
  if (range.empty()) return;
  long long a = 0, b = 0;
  int used = 0;
  if (std::sscanf(range.c_str(), "%lld-%lld%n", &a, &b, &used) == 2 && used == int(range.size())) {
  } else if (std::sscanf(range.c_str(), "%lld%n", &a, &used) == 1 && used == int(range.size())) {
    b = a;
  } else {
    user_error("[run] trace_steps = \"{}\": expected a step (\"5\") or a range of steps (\"5-7\")", range);
  }
  if (a < 1 || b < a) user_error("[run] trace_steps = \"{}\": steps count from 1, first <= last", range);
  first_ = a, last_ = b;
}

void StepTrace::add(const std::string& name, int64_t step, double ts_ms, double dur_ms, int thread, double comm_ms) {
  nlohmann::json args = {{"step", step + 1}};
  if (comm_ms > 0) args["exposed_comm_ms"] = comm_ms;
  events_.push_back({{"name", name}, {"ph", "X"}, {"ts", ts_ms * 1e3}, {"dur", dur_ms * 1e3}, {"pid", rank_},
                     {"tid", thread}, {"args", args}});
}

void StepTrace::finish_step(int64_t step) {
  if (step + 1 == last_) write();
}

void StepTrace::write() {
  if (written_ || events_.empty()) return;
  written_ = true;
  nlohmann::json meta = nlohmann::json::array();
  meta.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"name", fmt::format("rank {}", rank_)}}}});
  meta.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 0}, {"args", {{"name", "compute"}}}});
  meta.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 1}, {"args", {{"name", "data"}}}});
  meta.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 2},
                   {"args", {{"name", "collectives (blocked)"}}}});
  meta.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 3},
                   {"args", {{"name", "offload transfers and NVMe I/O (blocked)"}}}});
  for (auto& e : events_) meta.push_back(e);
  write_file_atomic(path_, nlohmann::json{{"traceEvents", meta}, {"displayTimeUnit", "ms"}}.dump());
}

StepTrace::~StepTrace() {
  try {
    write();
  } catch (...) {
  }
}

}  // namespace zt
