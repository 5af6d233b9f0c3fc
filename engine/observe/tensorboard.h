// TensorBoard event files (`[run] tensorboard = true`): every numeric field of every metrics.jsonl
// row as a scalar, written by ztrain itself. The format is TensorFlow's TFRecord framing
//   uint64 length, uint32 masked CRC-32C of the length, data, uint32 masked CRC-32C of the data
// around Event protocol buffers (tensorflow/core/util/event.proto: wall_time = 1, step = 2,
// file_version = 3, summary = 5; Summary.value = 1; Value: tag = 1, simple_value = 2,
// metadata = 9, tensor = 8), encoded here by hand: a few fields of two messages do not need
// protobuf's runtime (docs/dependencies.md).
//
// Tags: "<kind>/<field>" (nested objects joined with "/": "train/loss",
// "train/comm_ms_by_group/tp", "memory/device/activations"), each at the row's step and again as
// "<tag> vs tokens" at the tokens consumed so far (Megatron's second x-axis: runs with other batch
// sizes compare). The resolved spec is a text summary ("config") at the first step.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace zt {

// CRC-32C (Castagnoli), as TFRecord frames use it, and its masked form.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  // A new events.out.tfevents.<time>.<host>.<pid>.<run> file in `dir`. A run resumed after
  // `resumed_step` (> 0) first drops the events after that step from its own earlier files there
  // (those ending in .<run>, written after the checkpoint by the run that stopped), so no step
  // appears twice; other runs' files in a shared directory are left alone.
  TensorBoardWriter(const std::string& dir, const std::string& run, int64_t resumed_step, const std::string& spec_toml);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One metrics.jsonl row; flushed before returning (rows come at the log interval).
  void write(const nlohmann::json& row);
  const std::string& path() const { return path_; }

 private:
  void record(std::string_view event);
  std::string path_, spec_toml_;
  FILE* f_ = nullptr;
  int64_t step_ = 0;    // the last row's step: rows without one (telemetry) are shown there
  double tokens_ = 0;   // tokens consumed by the last train row
  bool spec_written_ = false;
};

}  // namespace zt
