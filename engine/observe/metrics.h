// metrics.jsonl: one JSON object per line, flushed as written so a crash keeps what was logged.
#pragma once
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

namespace zt {

class TensorBoardWriter;

class MetricsWriter {
 public:
  // Opens OUT_DIR/metrics.jsonl for a new run; an earlier run's file is kept as
  // metrics.<n>.jsonl rather than overwritten. A run resumed after step `resumed_step` (> 0)
  // continues the file instead: its rows up to that step stay, later ones (written after the
  // checkpoint by the run that stopped) are dropped, so no step appears twice.
  explicit MetricsWriter(const std::string& out_dir, int64_t resumed_step = 0);
  ~MetricsWriter();  // (out of line: TensorBoardWriter is complete there)
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  // Writes the row (and into the TensorBoard files, when enabled).
  void write(const nlohmann::json& record);
  // Every row from now on also into TensorBoard event files of run `run` in `dir` (empty: beside
  // metrics.jsonl; engine/observe/tensorboard.h), the resolved spec as their text summary;
  // returns their path.
  std::string enable_tensorboard(const std::string& dir, const std::string& run, const std::string& spec_toml);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  FILE* f_ = nullptr;
  std::mutex mu_;  // rows come from the training loop and the telemetry thread
  std::string out_dir_;
  int64_t resumed_step_ = 0;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace zt
