// The run spec loaded as ztrain runs it: the loader (engine/config/spec.h) given the model
// families' [model] rules and Hugging Face config.json for init_from (engine/config/model_keys.h).
// What every caller above the model layers uses.
#pragma once
#include <string>
#include <vector>

#include "engine/config/model_keys.h"
#include "engine/config/spec.h"

namespace zt {

// The families of models/registry.cpp and engine/hf/hf_config.h's read_hf_config.
const ModelKeyRules& model_key_rules();

inline RunSpec load_run_spec(const std::string& path, const std::vector<std::string>& overrides = {}) {
  return load_run_spec(path, overrides, model_key_rules());
}
inline RunSpec parse_run_spec(const std::string& toml_text, const std::string& source,
                              const std::vector<std::string>& overrides = {}) {
  return parse_run_spec(toml_text, source, overrides, model_key_rules());
}

}  // namespace zt
