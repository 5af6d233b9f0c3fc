// [run] trace_steps: a per-rank timeline of some steps as a Chrome trace (trace.rankR.json in
// out_dir; Perfetto and chrome://tracing open it): each micro-batch's data wait, forward and
// backward, the gradient reduction and the optimizer, with the exposed communication inside each.
// Device phases carry device time (CUDA events on a GPU), placed from the step's start.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt {

class StepTrace {
 public:
  // `range`: "" (off), "N" or "A-B" (1-based steps); UserError naming the key when malformed.
  StepTrace(const std::string& range, int rank, std::string path);
  bool wants(int64_t step) const { return step + 1 >= first_ && step + 1 <= last_; }  // step: 0-based
  // One event: `ts_ms` from the trace's origin (the first traced step's start), lasting `dur_ms`.
  void add(const std::string& name, int64_t step, double ts_ms, double dur_ms, int thread, double comm_ms = 0);
  // Writes the file once the last wanted step is done (and on destruction, if any event exists).
  void finish_step(int64_t step);
  ~StepTrace();

 private:
  void write();
  int64_t first_ = 0, last_ = -1;
  int rank_;
  std::string path_;
  nlohmann::json events_ = nlohmann::json::array();
  bool written_ = false;
};

}  // namespace zt
