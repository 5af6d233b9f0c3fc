// Check-failure reporting for ZT_CHECK.
#include "engine/core/status.h"

namespace zt {

void throw_check_failure(const char* file, int line, const char* cond, const std::string& msg) {
  throw RuntimeFailure(fmt::format("{}:{}: check failed: {}: {}", file, line, cond, msg));
}

}  // namespace zt
