// The model families' answers to the spec loader (see spec_loading.h).
#include "engine/hf/spec_loading.h"

#include "engine/hf/hf_config.h"
#include "engine/model/registry.h"

namespace zt {

namespace {
class FamilyKeyRules final : public ModelKeyRules {
 public:
  bool has_family(const std::string& arch) const override { return find_model_family(arch) != nullptr; }
  std::string family_names() const override { return model_family_names(); }
  void resolve(RunSpec::Model& m, const ModelKeyChecks& c) const override { model_family(m.arch).resolve(m, c); }
  std::vector<HfModelKey> read_hf_config(const std::string& dir) const override { return zt::read_hf_config(dir); }
  std::vector<std::string> lora_roles(const std::string& arch) const override {
    return model_family(arch).lora_roles();
  }
  std::string lora_default_targets(const std::string& arch) const override {
    return model_family(arch).lora_default_targets();
  }
};
}  // namespace

const ModelKeyRules& model_key_rules() {
  static const FamilyKeyRules rules;
  return rules;
}

}  // namespace zt
