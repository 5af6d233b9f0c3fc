// Hugging Face config.json and names (see hf_config.h).
#include "engine/hf/hf_config.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>
#include <nlohmann/json.hpp>

#include "engine/core/status.h"
#include "engine/model/registry.h"

namespace zt {

using json = nlohmann::json;

namespace {
// config.json as the families read it; every error names the file. Each field asked about is
// recorded, so that what is left unread afterwards can be refused by name.
class JsonConfig final : public HfConfigView {
 public:
  JsonConfig(nlohmann::json c, std::string path) : c_(std::move(c)), path_(std::move(path)) {}

  void ignore(const char* field) const override { find(field); }
  bool has(const char* field) const override {
    const nlohmann::json* v = find(field, /*read=*/false);
    return v && !v->is_null();
  }
  bool contains(const char* field) const override { return find(field, /*read=*/false) != nullptr; }
  int64_t integer(const char* field) const override {
    const nlohmann::json* v = find(field);
    if (!v) user_error("{}: no {}", path_, field);
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > (int64_t(1) << 31))
      user_error("{}: {} = {} is not a size", path_, field, v->dump());
    return v->get<int64_t>();
  }
  double number(const char* field, double dflt) const override {
    const nlohmann::json* v = present(field);
    if (!v) return dflt;
    if (!v->is_number()) user_error("{}: {} = {} is not a number", path_, field, v->dump());
    return v->get<double>();
  }
  std::string string(const char* field, const char* dflt) const override {
    const nlohmann::json* v = present(field);
    if (!v) return dflt;
    if (!v->is_string()) user_error("{}: {} = {} is not a string", path_, field, v->dump());
    return v->get<std::string>();
  }
  bool boolean(const char* field, bool dflt) const override {
    const nlohmann::json* v = present(field);
    if (!v) return dflt;
    if (!v->is_boolean()) user_error("{}: {} = {} is not true or false", path_, field, v->dump());
    return v->get<bool>();
  }
  std::string json(const char* field) const override {
    const nlohmann::json* v = find(field);
    return v ? v->dump() : "null";
  }
  [[noreturn]] void reject(const std::string& why) const override { user_error("{}: {}", path_, why); }

  // The fields (dotted paths) nobody read, null ones aside (a null field says nothing): an
  // object some of whose fields were read is looked into, any other is one field.
  std::vector<std::string> unread() const {
    std::vector<std::string> out;
    collect_unread(c_, "", out);
    return out;
  }
  const nlohmann::json& at(const std::string& dotted) const { return *find(dotted.c_str()); }

 private:
  // The value at a dotted path, or null when absent; `read`: recorded as read (asking whether a
  // field is there is not reading it).
  const nlohmann::json* find(const char* field, bool read = true) const {
    if (read) read_.insert(field);
    const nlohmann::json* v = &c_;
    std::string_view rest = field;
    while (v) {
      const size_t dot = rest.find('.');
      const std::string part(rest.substr(0, dot));
      v = v->is_object() && v->contains(part) ? &(*v)[part] : nullptr;
      if (dot == std::string_view::npos) break;
      rest.remove_prefix(dot + 1);
    }
    return v;
  }
  const nlohmann::json* present(const char* field) const {
    const nlohmann::json* v = find(field);
    return v && !v->is_null() ? v : nullptr;
  }
  void collect_unread(const nlohmann::json& obj, const std::string& prefix, std::vector<std::string>& out) const {
    for (const auto& [key, value] : obj.items()) {
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      if (read_.count(path) || value.is_null()) continue;
      const auto inner = read_.lower_bound(path + ".");
      if (value.is_object() && inner != read_.end() && inner->starts_with(path + "."))
        collect_unread(value, path, out);
      else
        out.push_back(path);
    }
  }

  nlohmann::json c_;
  std::string path_;
  mutable std::set<std::string> read_;
};

// Fields of every family's config.json that do not change the model's math: what the file is and
// which library wrote it, token ids (the tokenizer's business), the initialisation of new weights
// (init_from loads them all), generation defaults and the outputs transformers returns, and the
// attention implementation it picks (the same math). docs/models.md lists them.
constexpr const char* kIgnoredEverywhere[] = {
    "architectures", "_name_or_path", "transformers_version", "torch_dtype", "dtype", "auto_map",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "initializer_range", "use_cache", "return_dict", "output_attentions", "output_hidden_states",
    "torchscript", "_attn_implementation", "attn_implementation", "max_length", "min_length",
    "do_sample", "early_stopping", "num_beams", "temperature", "top_k", "top_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "num_return_sequences", "task_specific_params",
    "id2label", "label2id", "finetuning_task", "problem_type", "tokenizer_class", "prefix"};
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
  const ModelFamily* family = nullptr;
  for (const ModelFamily* candidate : model_families())
    if (candidate->reads_hf_model_type(type)) family = candidate;
  if (!family) user_error("{}: model_type = \"{}\" is not one ztrain builds ({})", path, type, model_family_names(false));
  // an encoder-decoder or cross-attention model is another model whatever its other fields say
  if (config.boolean("is_encoder_decoder", false) || config.boolean("add_cross_attention", false))
    config.reject("is_encoder_decoder / add_cross_attention: ztrain builds decoder-only models");
  for (const char* field : kIgnoredEverywhere) config.ignore(field);
  std::vector<HfModelKey> keys = family->read_hf_config(config);
  const std::vector<std::string> unread = config.unread();
  if (!unread.empty()) {
    std::string list;
    for (size_t i = 0; i < unread.size() && i < 4; ++i)
      list += fmt::format("{}{} = {}", i ? ", " : "", unread[i], config.at(unread[i]).dump());
    if (unread.size() > 4) list += fmt::format(" and {} more", unread.size() - 4);
    user_error("{}: {} not a field ztrain's {} reads: it may change the model's math, so it is refused rather "
               "than ignored (docs/models.md lists the fields read and ignored)",
               path, list + (unread.size() == 1 ? " is" : " are"), family->name());
  }
  return keys;
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
