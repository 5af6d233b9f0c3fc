// Hugging Face model directories: config.json <-> [model] keys, and our parameter names <->
// Hugging Face's. What each family maps is its entry's (engine/model/family.h); this file reads
// and writes the JSON.
#pragma once
#include <string>
#include <vector>

#include "engine/config/spec.h"
#include "engine/core/dtype.h"
#include "engine/model/family.h"

namespace zt {

// The [model] keys DIR/config.json determines (by the family that reads its model_type).
// UserError (naming the file and field) for a missing or malformed field or a model ztrain cannot
// build (another model_type, activation, rope_scaling, biases).
std::vector<HfModelKey> read_hf_config(const std::string& dir);

// config.json for [model] m, with torch_dtype `dtype`.
std::string hf_config_json(const RunSpec::Model& m, DType dtype);

// Hugging Face's name for our parameter `name` of arch, and whether its layout is transposed.
struct HfName {
  std::string name;
  bool transposed = false;
};
HfName hf_name(const std::string& arch, const std::string& name);

}  // namespace zt
