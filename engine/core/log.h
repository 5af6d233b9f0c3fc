// Logging through spdlog: one console logger, "[ztrain] message" lines on stderr.
#pragma once
#include <spdlog/spdlog.h>

namespace zt {
// Sets the pattern and level once; `verbose` enables debug messages.
void log_init(bool verbose = false);
}  // namespace zt
