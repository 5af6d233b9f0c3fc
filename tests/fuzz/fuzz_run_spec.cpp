// libFuzzer target: the run spec loader accepts or rejects with UserError, nothing else; what it
// accepts dumps to a resolved spec that loads back to itself.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/hf/spec_loading.h"
#include "engine/core/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const zt::RunSpec s = zt::parse_run_spec(std::string(reinterpret_cast<const char*>(data), size), "fuzz.toml");
    const std::string dump = zt::resolved_toml(s);
    if (zt::resolved_toml(zt::parse_run_spec(dump, "resolved.toml")) != dump) __builtin_trap();
  } catch (const zt::UserError&) {
  }
  return 0;
}
