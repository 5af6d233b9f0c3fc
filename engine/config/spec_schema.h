// The run spec's schema: one row per key, with its type, whether it is required, and where it
// lives in RunSpec. Parsing, --set overrides, validation messages and the resolved dump all read
// this one table, so a new key is one new row.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/config/spec.h"

namespace zt {

// A key with a fixed set of values (core/run_choices.h): the field, read and written as the index
// of its value among the enum's names.
struct SpecChoice {
  void* field;
  const std::string_view* names;
  size_t count;
  int (*get)(const void* field);
  void (*set)(void* field, int index);
  std::string_view name() const { return names[get(field)]; }
};
template <class E>
SpecChoice spec_choice(E* field) {
  return {field, ChoiceNames<E>::names.data(), ChoiceNames<E>::names.size(),
          [](const void* f) { return int(*static_cast<const E*>(f)); },
          [](void* f, int index) { *static_cast<E*>(f) = E(index); }};
}

using SpecField = std::variant<int64_t*, double*, std::string*, bool*, SpecChoice>;

// The values a numeric key takes: from lo to hi, either end open (excluded) or absent (infinite).
// One per key: validation checks it, and its messages and docs/spec-reference.md print it the
// same way (range_text). Relations between keys (min_lr <= lr) are checked apart.
struct SpecRange {
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool contains(double v) const { return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi); }
};
constexpr SpecRange at_least(double lo) { return {lo, std::numeric_limits<double>::infinity(), false, false}; }
constexpr SpecRange above(double lo) { return {lo, std::numeric_limits<double>::infinity(), true, false}; }
constexpr SpecRange between(double lo, double hi, bool lo_open = false, bool hi_open = false) {
  return {lo, hi, lo_open, hi_open};
}
// ">= 1", "> 0", "in [0, 1000000]", "in (0, 1)"
std::string range_text(const SpecRange& r);

struct SpecKey {
  const char* section;
  const char* key;
  bool required;
  SpecField (*field)(RunSpec&);
  const char* help;
  bool secret = false;  // never written to the resolved spec, logs or messages
  bool zero_unset = false;  // 0 means "not given" (a given value must be > 0): written commented out
  SpecRange range = {};     // numeric keys; an integer key without one is a count (>= 0; see key_range)
};

// k's choices, in the enum's order (empty: not a choice key); "\"auto\", \"cpu\", \"cuda\"", as messages
// and docs/spec-reference.md print them.
std::vector<std::string> key_choices(const SpecKey& k);
std::string choices_text(const SpecKey& k);

// k's range: its own; an integer key's is >= 0 by default (a count or a dimension; `seed` takes
// any value). Integer keys are also at most 2147483647 (the sizes they set are int32).
SpecRange key_range(const SpecKey& k);
// Whether k has a range to check and show.
bool has_range(const SpecKey& k);

const std::vector<SpecKey>& spec_schema();
// "[section] key", as messages and the resolved entries name a key.
std::string full_name(const SpecKey& k);

// A string / a float as TOML text (a float keeps its decimal point).
std::string toml_quote(const std::string& s);
std::string toml_float(double v);

// Nearest name by edit distance among `candidates`, or "" when nothing is close.
std::string nearest_name(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace zt
