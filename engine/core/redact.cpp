// redact_url_passwords (see redact.h).
#include "engine/core/redact.h"

namespace zt {

std::string redact_url_passwords(std::string_view text) {
  std::string out;
  size_t pos = 0;
  for (size_t scheme = text.find("://"); scheme != std::string_view::npos; scheme = text.find("://", pos)) {
    const size_t start = scheme + 3;
    const size_t end = std::min(text.find_first_of("/?# \t\n\"'", start), text.size());  // the authority
    const size_t at = text.rfind('@', end == 0 ? 0 : end - 1);
    out.append(text.substr(pos, start - pos));
    pos = start;
    if (at == std::string_view::npos || at < start || at >= end) continue;
    const size_t colon = text.find(':', start);
    if (colon != std::string_view::npos && colon < at) out.append(text.substr(start, colon + 1 - start));
    out += "***";
    pos = at;  // "@host..." follows
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace zt
