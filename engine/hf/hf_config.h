// Hugging Face model directories: config.json <-> [model] keys, and our parameter names <->
// Hugging Face's (GPT2LMHeadModel, LlamaForCausalLM).
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "engine/config/spec.h"
#include "engine/core/dtype.h"

namespace zt {

// A [model] key and the value config.json gives it, with the config.json field it came from.
struct HfModelKey {
  std::string key;  // [model] key: "arch", "n_layer", ...
  std::variant<int64_t, double, bool, std::string> value;
  std::string field;  // config.json's name for it: "num_hidden_layers", ...
  bool upper_bound = false;  // seq_len: the most the model supports, not a required value
};

// The [model] keys DIR/config.json determines. UserError (naming the file and field) for a
// missing or malformed field or a model ztrain cannot build (another model_type, activation,
// rope_scaling, biases).
std::vector<HfModelKey> read_hf_config(const std::string& dir);

// config.json for [model] m, with torch_dtype `dtype`.
std::string hf_config_json(const RunSpec::Model& m, DType dtype);

// Hugging Face's name for our parameter `name` of arch, and whether its layout is transposed
// (GPT-2's Conv1D weights are stored (in, out), ours (out, in) as nn.Linear).
struct HfName {
  std::string name;
  bool transposed = false;
};
HfName hf_name(const std::string& arch, const std::string& name);

}  // namespace zt
