// Human-readable byte sizes ("200GB") for spec values.
#include "engine/core/byte_size.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "engine/core/status.h"

namespace zt {

uint64_t parse_byte_size(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  std::string unit(end);
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  for (auto& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  double mul = 0;
  if (unit.empty() || unit == "B") mul = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") mul = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mul = 1048576.0;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mul = 1073741824.0;
  else if (unit == "T" || unit == "TB" || unit == "TIB") mul = 1099511627776.0;
  if (end == text.c_str() || mul == 0 || !(v > 0) || !std::isfinite(v) || v * mul > 9e18)
    user_error("{}: '{}' is not a size (examples: 200GB, 512MiB, 1000000)", what, text);
  return uint64_t(v * mul);
}

int64_t parse_count(const std::string& text, const std::string& what, int64_t min_value, int64_t max_value) {
  const bool digits = !text.empty() && text.size() <= 18 && text.find_first_not_of("0123456789") == std::string::npos;
  const int64_t n = digits ? std::stoll(text) : -1;
  if (!digits || n < min_value || n > max_value)
    user_error("{}: expected a whole number from {} to {}, got '{}'", what, min_value, max_value, text);
  return n;
}

}  // namespace zt
