// Passwords in URLs (http://user:password@host/...) are kept only in memory for the request:
// everything ztrain shows or writes (log lines, error messages, config.resolved.toml, checkpoint
// metadata) goes through this.
#pragma once
#include <string>
#include <string_view>

namespace zt {

// `text` with the password of every URL's userinfo replaced by "***" (user:***@host); a userinfo
// without ':' is a token and is replaced whole (***@host). The userinfo is all before the URL's
// last '@', whatever it holds ('/', '@'): a path holding an '@' is redacted up to it too.
std::string redact_url_passwords(std::string_view text);

}  // namespace zt
