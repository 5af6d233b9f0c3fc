// Hugging Face config.json and names (see hf_config.h).
#include "engine/hf/hf_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/core/status.h"
#include "engine/model/registry.h"

namespace zt {

using json = nlohmann::json;

namespace {
// config.json as the families read it; every error names the file.
class JsonConfig final : public HfConfigView {
 public:
  JsonConfig(nlohmann::json c, std::string path) : c_(std::move(c)), path_(std::move(path)) {}

  bool has(const char* field) const override { return c_.contains(field) && !c_[field].is_null(); }
  bool contains(const char* field) const override { return c_.contains(field); }
  int64_t integer(const char* field) const override {
    if (!c_.contains(field)) user_error("{}: no {}", path_, field);
    const nlohmann::json& v = c_[field];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t(1) << 31))
      user_error("{}: {} = {} is not a size", path_, field, v.dump());
    return v.get<int64_t>();
  }
  double number(const char* field, double dflt) const override {
    if (!has(field)) return dflt;
    if (!c_[field].is_number()) user_error("{}: {} = {} is not a number", path_, field, c_[field].dump());
    return c_[field].get<double>();
  }
  std::string string(const char* field, const char* dflt) const override {
    if (!has(field)) return dflt;
    if (!c_[field].is_string()) user_error("{}: {} = {} is not a string", path_, field, c_[field].dump());
    return c_[field].get<std::string>();
  }
  bool boolean(const char* field, bool dflt) const override {
    if (!has(field)) return dflt;
    if (!c_[field].is_boolean()) user_error("{}: {} = {} is not true or false", path_, field, c_[field].dump());
    return c_[field].get<bool>();
  }
  std::string json(const char* field) const override { return c_.contains(field) ? c_[field].dump() : "null"; }
  [[noreturn]] void reject(const std::string& why) const override { user_error("{}: {}", path_, why); }

 private:
  nlohmann::json c_;
  std::string path_;
};
}  // namespace

std::vector<HfModelKey> read_hf_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  std::ifstream f(path);
  if (!f) user_error("{}: cannot open ([model] init_from must be a Hugging Face model directory)", path);
  json c;
  try {
    c = json::parse(f);
  } catch (const json::exception& e) {
    user_error("{}: not JSON ({})", path, e.what());
  }
  if (!c.is_object()) user_error("{}: not a JSON object", path);
  const JsonConfig config(std::move(c), path);
  const std::string type = config.string("model_type", "");
  for (const ModelFamily* family : model_families())
    if (family->reads_hf_model_type(type)) return family->read_hf_config(config);
  user_error("{}: model_type = \"{}\" is not one ztrain builds ({})", path, type, model_family_names(false));
}

std::string hf_config_json(const RunSpec::Model& m, DType dtype) {
  const char* torch_dtype = dtype == DType::F32 ? "float32" : dtype == DType::BF16 ? "bfloat16" : "float16";
  json c = json::object();
  for (const auto& [field, value] : model_family(m.arch).hf_config(m, torch_dtype))
    std::visit([&, &field = field](const auto& v) { c[field] = v; }, value);
  return c.dump(2) + "\n";
}

HfName hf_name(const std::string& arch, const std::string& name) {
  return {name, model_family(arch).hf_transposed(name)};
}

}  // namespace zt
