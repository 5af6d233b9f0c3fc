// Parses "200GB", "512MiB", "1.5T", "1000000" into bytes (K/M/G/T are powers of 1024);
// UserError naming `what` otherwise.
#pragma once
#include <cstdint>
#include <string>

namespace zt {
uint64_t parse_byte_size(const std::string& text, const std::string& what);
}  // namespace zt
