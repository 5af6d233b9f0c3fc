// libFuzzer target: shard header parsing never reads out of bounds and fails only with UserError.
#include <cstddef>
#include <cstdint>

#include "data/shard.h"
#include "engine/core/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const zt::data::ShardHeader h = zt::data::parse_shard_header(data, size, "fuzz");
    // A header that parses must describe exactly the file's bytes (version 2: with its sections).
    if (h.file_bytes() != size) __builtin_trap();
  } catch (const zt::UserError&) {
  }
  return 0;
}
