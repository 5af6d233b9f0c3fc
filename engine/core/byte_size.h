// Parses "200GB", "512MiB", "1.5T", "1000000" into bytes (K/M/G/T are powers of 1024);
// UserError naming `what` otherwise.
#pragma once
#include <cstdint>
#include <string>

namespace zt {
uint64_t parse_byte_size(const std::string& text, const std::string& what);

// A command-line count: decimal digits only, in [min_value, max_value]; "abc", "0" (below 1),
// "-5", "1e3" and "10xyz" are UserErrors naming `what` (e.g. "--batches").
int64_t parse_count(const std::string& text, const std::string& what, int64_t min_value = 1,
                    int64_t max_value = int64_t(1) << 40);
}  // namespace zt
