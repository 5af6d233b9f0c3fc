// Console logger setup.
#include "engine/core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace zt {

void log_init(bool verbose) {
  static bool done = false;
  if (!done) {
    auto logger = spdlog::stderr_color_mt("ztrain");
    spdlog::set_default_logger(logger);
    spdlog::set_pattern("[ztrain %H:%M:%S] %^%v%$");
    done = true;
  }
  spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::info);
}

}  // namespace zt
