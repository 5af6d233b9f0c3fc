// What the run spec's loader asks about [model] that only the model families and a Hugging Face
// config.json answer: the family an arch names, its defaults and checks, and the keys config.json
// sets for [model] init_from. Those live above config in DESIGN's layers (models/, engine/hf/), so
// the loader is given them (spec.h's load_run_spec) rather than including them; the one
// implementation is engine/hf/spec_loading.h's model_key_rules().
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "engine/config/spec.h"

namespace zt {

// A [model] key and the value config.json gives it, with the config.json field it came from.
struct HfModelKey {
  std::string key;  // [model] key: "n_layer", ...
  std::variant<int64_t, double, bool, std::string> value;
  std::string field;  // config.json's name for it: "num_hidden_layers", ...
  bool upper_bound = false;  // seq_len: the most the model supports, not a required value
};

// The spec reader's hooks for a family's [model] checks: check(ok, key, why) reports a bad value
// of [model] key (naming the file and line), given(key) says whether the spec set the key itself.
struct ModelKeyChecks {
  std::function<void(bool ok, const char* key, const std::string& why)> check;
  std::function<bool(const char* key)> given;
};

class ModelKeyRules {
 public:
  virtual ~ModelKeyRules() = default;
  // Whether a family is named `arch`; the families' names, for the message when none is:
  // "\"gpt2\", \"llama\"".
  virtual bool has_family(const std::string& arch) const = 0;
  virtual std::string family_names() const = 0;
  // m.arch's family fills in its defaults for the keys the spec left out and checks the keys whose
  // meaning depends on it (the loader has checked the generic ones).
  virtual void resolve(RunSpec::Model& m, const ModelKeyChecks& c) const = 0;
  // The [model] keys DIR/config.json determines; UserError naming the file and field when it
  // cannot (see engine/hf/hf_config.h).
  virtual std::vector<HfModelKey> read_hf_config(const std::string& dir) const = 0;
  // The roles of arch's linear layers that [lora] targets may name ("q", "o", "up", ...), and the
  // ones it targets when the spec names none (PEFT's defaults for the family).
  virtual std::vector<std::string> lora_roles(const std::string& arch) const = 0;
  virtual std::string lora_default_targets(const std::string& arch) const = 0;
};

}  // namespace zt
