// redact_url_passwords (see redact.h).
#include "engine/core/redact.h"

namespace zt {

std::string redact_url_passwords(std::string_view text) {
  std::string out;
  size_t pos = 0;
  for (size_t scheme = text.find("://"); scheme != std::string_view::npos; scheme = text.find("://", pos)) {
    const size_t start = scheme + 3;
    // The URL runs to the next blank or quote. Its userinfo ends at its last '@': a password or
    // token may hold an unencoded '/', '?', '#' or '@' (curl then fails on the URL, and the
    // failure message prints it), so all that comes before the last '@' is redacted, the user
    // name kept when it holds no '/'. The safe side: a path with an '@' in it
    // ("host/models@v2") is shown as "***@v2".
    const size_t end = std::min(text.find_first_of(" \t\n\"'", start), text.size());
    const size_t at = text.substr(0, end).rfind('@');
    out.append(text.substr(pos, start - pos));
    pos = start;
    if (at == std::string_view::npos || at < start) continue;
    const std::string_view userinfo = text.substr(start, at - start);
    const size_t colon = userinfo.find(':');
    const bool plain_user = colon != std::string_view::npos && userinfo.substr(0, colon).find('/') == std::string_view::npos;
    if (plain_user) out.append(userinfo.substr(0, colon + 1));
    out += "***";
    pos = at;  // "@host..." follows
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace zt
