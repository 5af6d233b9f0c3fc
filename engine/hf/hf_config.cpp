// Hugging Face config.json and names (see hf_config.h).
#include "engine/hf/hf_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

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

  // The fields nobody read, as (dotted path, value), null and empty ones aside (they say
  // nothing): an object some of whose fields were read is looked into, any other is one field.
  std::vector<std::pair<std::string, const nlohmann::json*>> unread() const {
    std::vector<std::pair<std::string, const nlohmann::json*>> out;
    std::vector<std::string> parts;
    collect_unread(c_, parts, out);
    return out;
  }

 private:
  using Path = std::vector<std::string>;  // a field's keys from the top: a key may hold a '.'

  static Path split(std::string_view field) {
    Path parts;
    for (size_t dot; (dot = field.find('.')) != std::string_view::npos; field.remove_prefix(dot + 1))
      parts.emplace_back(field.substr(0, dot));
    parts.emplace_back(field);
    return parts;
  }
  // The value at a dotted path, or null when absent; `read`: recorded as read (asking whether a
  // field is there is not reading it).
  const nlohmann::json* find(const char* field, bool read = true) const {
    const Path parts = split(field);
    if (read) read_.insert(parts);
    const nlohmann::json* v = &c_;
    for (const std::string& part : parts) v = v->is_object() && v->contains(part) ? &(*v)[part] : nullptr;
    return v;
  }
  const nlohmann::json* present(const char* field) const {
    const nlohmann::json* v = find(field);
    return v && !v->is_null() ? v : nullptr;
  }
  void collect_unread(const nlohmann::json& obj, Path& at,
                      std::vector<std::pair<std::string, const nlohmann::json*>>& out) const {
    for (const auto& [key, value] : obj.items()) {
      at.push_back(key);
      const bool empty = value.is_null() || ((value.is_object() || value.is_array()) && value.empty());
      if (!read_.count(at) && !empty) {
        // an object with a field read below it: its fields one by one
        const auto inner = read_.upper_bound(at);
        const bool looked_into = inner != read_.end() && inner->size() > at.size() &&
                                 std::equal(at.begin(), at.end(), inner->begin());
        if (value.is_object() && looked_into) {
          collect_unread(value, at, out);
        } else {
          std::string dotted;
          for (const std::string& part : at) dotted += (dotted.empty() ? "" : ".") + part;
          out.emplace_back(dotted, &value);
        }
      }
      at.pop_back();
    }
  }

  nlohmann::json c_;
  std::string path_;
  mutable std::set<Path> read_;
};

// Fields of every family's config.json that do not change the model's math: what the file is and
// which library wrote it, token ids (the tokenizer's business), the initialisation of new weights
// (init_from loads them all), generation defaults and the outputs transformers returns, and the
// attention implementation it picks (the same math). docs/models.md lists them.
constexpr const char* kIgnoredEverywhere[] = {
    // the file and who wrote it
    "architectures", "_name_or_path", "transformers_version", "torch_dtype", "dtype", "use_bfloat16", "auto_map",
    "_commit_hash", "gradient_checkpointing",
    // token ids: the tokenizer's business
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    // the initialisation of new weights: init_from loads them all
    "initializer_range",
    // what transformers returns and how it computes it (the same math)
    "use_cache", "output_past", "return_dict", "output_attentions", "output_hidden_states", "output_scores",
    "return_dict_in_generate", "torchscript", "tf_legacy_loss", "_attn_implementation", "attn_implementation",
    "_attn_implementation_autoset", "chunk_size_feed_forward", "is_decoder", "tie_encoder_decoder",
    // generation defaults
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "num_return_sequences", "remove_invalid_values", "task_specific_params",
    // classification heads: labels and task
    "id2label", "label2id", "_num_labels", "finetuning_task", "problem_type", "tokenizer_class", "prefix"};
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
  const auto unread = config.unread();
  if (!unread.empty()) {
    std::string list;
    for (size_t i = 0; i < unread.size() && i < 4; ++i)
      list += fmt::format("{}{} = {}", i ? ", " : "", unread[i].first, unread[i].second->dump());
    if (unread.size() > 4) list += fmt::format(" and {} more", unread.size() - 4);
    user_error("{}: {} {} ztrain's {} reads: {} the model's math, so {} refused rather than ignored "
               "(docs/models.md lists the fields read and ignored)",
               path, list, unread.size() == 1 ? "is not a field" : "are not fields", family->name(),
               unread.size() == 1 ? "it may change" : "they may change", unread.size() == 1 ? "it is" : "they are");
  }
  return keys;
}

std::string hf_config_json(const RunSpec::Model& m, DType dtype) {
  const char* torch_dtype = dtype == DType::F32 ? "float32" : dtype == DType::BF16 ? "bfloat16" : "float16";
  json c = json::object();
  // a dotted field is one inside an object ("rope_scaling.factor")
  for (const auto& [field, value] : model_family(m.arch).hf_config(m, torch_dtype)) {
    std::string pointer = "/" + field;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    std::visit([&](const auto& v) { c[json::json_pointer(pointer)] = v; }, value);
  }
  return c.dump(2) + "\n";
}

HfName hf_name(const std::string& arch, const std::string& name) {
  return {name, model_family(arch).hf_transposed(name)};
}

}  // namespace zt
