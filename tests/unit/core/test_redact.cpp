// Passwords in URLs never reach what ztrain prints or writes (engine/core/redact.h).
#include <catch2/catch.hpp>

#include "engine/core/redact.h"

using namespace zt;

TEST_CASE("every URL's userinfo is redacted, whatever it holds", "[core][redact]") {
  CHECK(redact_url_passwords("http://user:secret@host/path") == "http://user:***@host/path");
  CHECK(redact_url_passwords("GET https://token@host/x failed") == "GET https://***@host/x failed");
  CHECK(redact_url_passwords("s3://bucket/prefix and /local/path") == "s3://bucket/prefix and /local/path");
  CHECK(redact_url_passwords("https://host/models@v2/x") == "https://***@v2/x");  // the safe side
  CHECK(redact_url_passwords("https://dG9r/ZW4=@host/x") == "https://***@host/x");  // a token holding '/' 
  CHECK(redact_url_passwords("a http://u:p@h/x b https://u2:p2@h2 c") == "a http://u:***@h/x b https://u2:***@h2 c");
  // hardening round 4, item 9: a password with an unencoded '/' (and '?', '#', '@') was printed
  for (const char* secret : {"pa/ss", "p/a?s#s", "p@ss/word", "/leading", "trailing/", "p:a:ss"}) {
    CAPTURE(secret);
    const std::string url = std::string("http://user:") + secret + "@127.0.0.1:9/data/train";
    const std::string shown = redact_url_passwords("cannot fetch \"" + url + "\": connection refused");
    CHECK(shown == "cannot fetch \"http://user:***@127.0.0.1:9/data/train\": connection refused");
  }
}
