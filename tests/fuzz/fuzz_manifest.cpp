// libFuzzer target: manifest parsing accepts or rejects with UserError, nothing else.
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/manifest.h"
#include "engine/core/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const zt::data::Manifest m =
        zt::data::parse_manifest(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
    for (const auto& s : m.shards)
      if (s.bytes != 64 + s.tokens * m.token_bytes || s.file.empty()) __builtin_trap();
  } catch (const zt::UserError&) {
  }
  return 0;
}
