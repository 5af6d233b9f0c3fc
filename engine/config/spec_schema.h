// The run spec's schema: one row per key, with its type, whether it is required, and where it
// lives in RunSpec. Parsing, --set overrides, validation messages and the resolved dump all read
// this one table, so a new key is one new row.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "engine/config/spec.h"

namespace zt {

using SpecField = std::variant<int64_t*, double*, std::string*, bool*>;

struct SpecKey {
  const char* section;
  const char* key;
  bool required;
  SpecField (*field)(RunSpec&);
  const char* help;
  bool secret = false;  // never written to the resolved spec, logs or messages
  bool zero_unset = false;  // 0 means "not given" (a given value must be > 0): written commented out
};

const std::vector<SpecKey>& spec_schema();

// A string / a float as TOML text (a float keeps its decimal point).
std::string toml_quote(const std::string& s);
std::string toml_float(double v);

// Nearest name by edit distance among `candidates`, or "" when nothing is close.
std::string nearest_name(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace zt
