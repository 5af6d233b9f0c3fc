// metrics.jsonl writer.
#include "engine/observe/metrics.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/core/log.h"
#include "engine/core/atomic_file.h"
#include "engine/core/status.h"
#include "engine/observe/tensorboard.h"

namespace zt {

MetricsWriter::MetricsWriter(const std::string& out_dir, int64_t resumed_step)
    : out_dir_(out_dir), resumed_step_(resumed_step) {
  namespace fs = std::filesystem;
  path_ = (fs::path(out_dir) / "metrics.jsonl").string();
  if (resumed_step > 0 && fs::exists(path_)) {
    std::string kept;
    {
      std::ifstream in(path_);
      for (std::string line; std::getline(in, line);) {
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded()) continue;  // a line cut by the crash
        if (j.contains("step") && j["step"].is_number() && j["step"].get<int64_t>() > resumed_step) continue;
        kept += line + "\n";
      }
    }
    write_file_atomic(path_, kept);
    f_ = std::fopen(path_.c_str(), "a");
    if (!f_) throw RuntimeFailure(fmt::format("{}: cannot open: {}", path_, std::strerror(errno)));
    return;
  }
  if (fs::exists(path_) && fs::file_size(path_) > 0) {
    int n = 1;
    while (fs::exists(fs::path(out_dir) / fmt::format("metrics.{}.jsonl", n))) ++n;
    const fs::path kept = fs::path(out_dir) / fmt::format("metrics.{}.jsonl", n);
    fs::rename(path_, kept);
    spdlog::info("kept the previous run's metrics as {}", kept.string());
  }
  // O_APPEND: each row lands at the file's current end, so a truncation under a running job
  // (logrotate's copytruncate) leaves a file that starts clean instead of a hole of NUL bytes.
  f_ = std::fopen(path_.c_str(), "a");
  if (!f_) throw RuntimeFailure(fmt::format("{}: cannot create: {}", path_, std::strerror(errno)));
}

std::string MetricsWriter::enable_tensorboard(const std::string& dir, const std::string& run,
                                             const std::string& spec_toml) {
  std::lock_guard lock(mu_);
  const std::string where = dir.empty() ? out_dir_ : dir;
  std::error_code ec;
  std::filesystem::create_directories(where, ec);
  if (ec) user_error("[run] tensorboard_dir = \"{}\": cannot create it: {}", where, ec.message());
  tensorboard_ = std::make_unique<TensorBoardWriter>(where, run, resumed_step_, spec_toml);
  return tensorboard_->path();
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  std::lock_guard lock(mu_);
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
    throw RuntimeFailure(fmt::format("{}: write failed: {}", path_, std::strerror(errno)));
  if (tensorboard_) tensorboard_->write(record);
}

}  // namespace zt
