// libFuzzer target: a safetensors file's header never makes the reader trust an offset outside the
// file or overlap two tensors, and fails only with UserError.
#include <cstddef>
#include <cstdint>

#include "engine/core/status.h"
#include "engine/hf/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto tensors = zt::parse_safetensors_bytes(data, size, "fuzz");
    for (const auto& t : tensors) {
      // every accepted tensor lies inside the file and holds exactly dtype x shape bytes
      if (t.data_start + t.end > size || t.begin > t.end) __builtin_trap();
      if (t.numel() * zt::dtype_size(t.dtype) != t.end - t.begin) __builtin_trap();
    }
  } catch (const zt::UserError&) {
  }
  return 0;
}
