// Console logger setup.
#include "engine/core/log.h"

#include <cstdio>
#include <mutex>

#include <spdlog/sinks/base_sink.h>

#include "engine/core/redact.h"

namespace zt {

namespace {
// stderr, with URL passwords redacted from every line (a spec's http://user:pass@... source is
// logged in several places).
class RedactingStderrSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    const std::string line = redact_url_passwords(std::string_view(formatted.data(), formatted.size()));
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }
};
}  // namespace

void log_init(bool verbose) {
  static bool done = false;
  if (!done) {
    auto logger = std::make_shared<spdlog::logger>("ztrain", std::make_shared<RedactingStderrSink>());
    spdlog::set_default_logger(logger);
    spdlog::set_pattern("[ztrain %H:%M:%S] %v");
    done = true;
  }
  spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::info);
}

}  // namespace zt
