// A stand-in for the few fmt features ztrain's core uses, so tools/gpu_check.sh can build the
// CUDA and CPU backends on a GPU machine that has no fmt (only the CUDA toolkit). Replacement
// fields are filled in order; format specs ("{:.1f}") are honoured for floats' precision and
// ignored otherwise. Used only by that build; the real build uses libfmt.
#pragma once
#include <cstddef>
#include <iomanip>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

namespace fmt {

template <typename... Args>
using format_string = std::string_view;

namespace detail {
inline void put(std::ostringstream& os, std::string_view spec, const auto& v) {
  using T = std::decay_t<decltype(v)>;
  if constexpr (std::is_floating_point_v<T>) {
    const auto dot = spec.find('.');
    if (dot != std::string_view::npos) os << std::fixed << std::setprecision(std::stoi(std::string(spec.substr(dot + 1))));
    os << v;
    os.unsetf(std::ios::fixed);
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!spec.empty() && spec.back() == 'x') os << std::hex << v << std::dec;
    else os << v;
  } else {
    os << v;
  }
}
inline void format_rest(std::ostringstream& os, std::string_view f) { os << f; }
template <typename A, typename... Rest>
void format_rest(std::ostringstream& os, std::string_view f, const A& a, const Rest&... rest) {
  const auto open = f.find('{');
  if (open == std::string_view::npos) {
    os << f;
    return;
  }
  const auto close = f.find('}', open);
  os << f.substr(0, open);
  std::string_view spec = f.substr(open + 1, close - open - 1);
  if (!spec.empty() && spec.front() == ':') spec.remove_prefix(1);
  put(os, spec, a);
  format_rest(os, f.substr(close + 1), rest...);
}
}  // namespace detail

template <typename... Args>
std::string format(std::string_view f, const Args&... args) {
  std::ostringstream os;
  detail::format_rest(os, f, args...);
  return os.str();
}

}  // namespace fmt
