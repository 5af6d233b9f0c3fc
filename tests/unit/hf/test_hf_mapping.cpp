// The Hugging Face mapping of each model family (models/*_family.cpp through engine/hf): config.json
// written for a [model] reads back as the same keys; the names and layouts; refusals name the file.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <variant>

#include <fmt/format.h>

#include "engine/core/status.h"
#include "engine/hf/hf_config.h"
#include "engine/model/registry.h"

using namespace zt;

namespace {
std::string write_config(const std::string& dir, const std::string& json) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << json;
  return dir;
}

std::string refusal(const std::string& dir) {
  try {
    read_hf_config(dir);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("config.json written for a [model] reads back as the same keys", "[hf]") {
  const std::string root = (std::filesystem::temp_directory_path() / "zt_hf_mapping").string();
  for (const ModelFamily* f : model_families()) {
    CAPTURE(f->name());
    RunSpec::Model m;
    m.arch = f->name();
    m.n_layer = 3, m.n_head = 4, m.d_model = 64, m.d_ff = 96, m.vocab_size = 300, m.seq_len = 128;
    m.n_kv_head = std::string(f->name()) == "llama" ? 2 : 4;
    m.norm_eps = 1e-6, m.rope_theta = 10000.0, m.tie_embeddings = std::string(f->name()) == "gpt2";
    const std::string dir = write_config(root + "/" + f->name(), hf_config_json(m, DType::BF16));
    int seen = 0;
    for (const HfModelKey& k : read_hf_config(dir)) {
      CAPTURE(k.key, k.field);
      ++seen;
      if (k.key == "arch") REQUIRE(std::get<std::string>(k.value) == m.arch);
      if (k.key == "n_layer") REQUIRE(std::get<int64_t>(k.value) == m.n_layer);
      if (k.key == "n_head") REQUIRE(std::get<int64_t>(k.value) == m.n_head);
      if (k.key == "n_kv_head") REQUIRE(std::get<int64_t>(k.value) == m.n_kv_head);
      if (k.key == "d_model") REQUIRE(std::get<int64_t>(k.value) == m.d_model);
      if (k.key == "d_ff") REQUIRE(std::get<int64_t>(k.value) == m.d_ff);
      if (k.key == "vocab_size") REQUIRE(std::get<int64_t>(k.value) == m.vocab_size);
      if (k.key == "seq_len") REQUIRE((std::get<int64_t>(k.value) == m.seq_len && k.upper_bound));
      if (k.key == "norm_eps") REQUIRE(std::get<double>(k.value) == m.norm_eps);
      if (k.key == "tie_embeddings") REQUIRE(std::get<bool>(k.value) == m.tie_embeddings);
    }
    REQUIRE(seen >= 8);
  }
  std::filesystem::remove_all(root);
}

TEST_CASE("Hugging Face names and layouts per family", "[hf]") {
  // GPT-2's Conv1D weights are stored (in, out); its other tensors and all of Llama's are not
  REQUIRE(hf_name("gpt2", "transformer.h.0.attn.c_attn.weight").transposed);
  REQUIRE(hf_name("gpt2", "transformer.h.11.mlp.c_proj.weight").transposed);
  REQUIRE_FALSE(hf_name("gpt2", "transformer.h.0.attn.c_attn.bias").transposed);
  REQUIRE_FALSE(hf_name("gpt2", "transformer.wte.weight").transposed);
  REQUIRE_FALSE(hf_name("llama", "model.layers.0.mlp.down_proj.weight").transposed);
  REQUIRE(hf_name("llama", "model.layers.0.mlp.down_proj.weight").name == "model.layers.0.mlp.down_proj.weight");
  // only GPT-2's learned positions may come with more rows than the model uses
  REQUIRE(model_family("gpt2").hf_row_prefix("transformer.wpe.weight"));
  REQUIRE_FALSE(model_family("gpt2").hf_row_prefix("transformer.wte.weight"));
  REQUIRE_FALSE(model_family("llama").hf_row_prefix("model.embed_tokens.weight"));
  REQUIRE_THROWS_AS(model_family("mamba"), UserError);
}

TEST_CASE("config.json a family cannot build is refused, naming the file and the field", "[hf]") {
  const std::string root = (std::filesystem::temp_directory_path() / "zt_hf_refusals").string();
  const std::string llama = R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4,
    "hidden_size": 64, "intermediate_size": 96, "vocab_size": 300, "max_position_embeddings": 128)";
  REQUIRE(refusal(write_config(root + "/t5", R"({"model_type": "t5"})")) ==
          root + "/t5/config.json: model_type = \"t5\" is not one ztrain builds (gpt2, llama, mistral, qwen2, qwen3)");
  REQUIRE(refusal(write_config(root + "/scaled", llama + R"(, "rope_scaling": {"type": "linear"}})"))
              .find("config.json: rope_scaling.rope_type = \"linear\" is not supported") != std::string::npos);
  REQUIRE(refusal(write_config(root + "/gelu", R"({"model_type": "gpt2", "activation_function": "relu"})"))
              .find("activation_function = \"relu\"") != std::string::npos);
  REQUIRE(refusal(write_config(root + "/nolayers", R"({"model_type": "gpt2", "n_embd": 64})")) ==
          root + "/nolayers/config.json: no n_layer");
  REQUIRE(refusal(write_config(root + "/llama_window", llama + R"(, "sliding_window": 4096})"))
              .find("sliding_window = 4096 is not supported") != std::string::npos);
  // Mistral v0.1's window; Qwen's when use_sliding_window says it is used (unused, it is ignored)
  std::string mistral = llama, qwen2 = llama;
  mistral.replace(mistral.find("\"llama\""), 7, "\"mistral\"");
  qwen2.replace(qwen2.find("\"llama\""), 7, "\"qwen2\"");
  REQUIRE(refusal(write_config(root + "/mistral", mistral + R"(, "sliding_window": 4096})"))
              .find("sliding_window = 4096 is not supported") != std::string::npos);
  REQUIRE(refusal(write_config(root + "/qwen2", qwen2 + R"(, "sliding_window": 4096, "use_sliding_window": true})"))
              .find("sliding_window = 4096 with use_sliding_window = true is not supported") != std::string::npos);
  REQUIRE(read_hf_config(write_config(root + "/qwen2_off", qwen2 + R"(, "sliding_window": 4096,
    "use_sliding_window": false, "max_window_layers": 21})"))[0].value == HfModelKey{"arch", std::string("qwen2"), ""}.value);
  std::filesystem::remove_all(root);
}

// Hardening round 4, item 3: a Llama 3 config.json in transformers v5's spelling (rope_parameters,
// no top-level rope_theta) loaded as rope_theta 10000 without scaling, gradients 77% off.
TEST_CASE("config.json fields that change the math are read or refused, never ignored", "[hf]") {
  const std::string root = (std::filesystem::temp_directory_path() / "zt_hf_fields").string();
  const std::string llama = R"({"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4,
    "hidden_size": 64, "intermediate_size": 96, "vocab_size": 300, "max_position_embeddings": 128)";
  auto rope_theta_of = [](const std::string& dir) {
    for (const HfModelKey& k : read_hf_config(dir))
      if (k.key == "rope_theta") return std::get<double>(k.value);
    return -1.0;
  };
  const std::string v5_llama3 = llama + R"(, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3",
    "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})";
  // Llama 3.1's scaling in v5's spelling: read whole (theta and the rule's four fields)
  const std::string v5_dir = write_config(root + "/v5_llama3", v5_llama3);
  REQUIRE(rope_theta_of(v5_dir) == 500000.0);
  std::map<std::string, std::string> scaling;
  for (const HfModelKey& k : read_hf_config(v5_dir))
    if (k.key.rfind("rope_scaling", 0) == 0) std::visit([&](const auto& v) { scaling[k.key] = fmt::format("{}", v); }, k.value);
  REQUIRE(scaling == std::map<std::string, std::string>{{"rope_scaling", "llama3"},
                                                        {"rope_scaling_factor", "8"},
                                                        {"rope_scaling_low_freq_factor", "1"},
                                                        {"rope_scaling_high_freq_factor", "4"},
                                                        {"rope_scaling_original_max_positions", "8192"}});
  // another scaling in v5's spelling is refused by name
  REQUIRE(refusal(write_config(root + "/v5_yarn", llama + R"(, "rope_parameters": {"rope_theta": 500000.0,
    "rope_type": "yarn", "factor": 4.0}})")).find("rope_parameters.rope_type = \"yarn\" is not supported") !=
          std::string::npos);
  // plain RoPE in v5's spelling is read from it
  REQUIRE(rope_theta_of(write_config(root + "/v5_plain", llama + R"(, "rope_parameters": {"rope_theta": 500000.0,
    "rope_type": "default"}})")) == 500000.0);
  REQUIRE(refusal(write_config(root + "/v5_both", llama + R"(, "rope_theta": 10000.0,
    "rope_parameters": {"rope_theta": 500000.0}})")).find("disagree") != std::string::npos);
  // a field of rope_parameters not read (a scaling field under the default type) and a top-level
  // field ztrain does not know are refused by name
  REQUIRE(refusal(write_config(root + "/v5_extra", llama + R"(, "rope_parameters": {"rope_theta": 500000.0,
    "partial_rotary_factor": 0.5}})")).find("rope_parameters.partial_rotary_factor = 0.5 is not a field ztrain's llama "
                                           "reads") != std::string::npos);
  REQUIRE(refusal(write_config(root + "/unknown", llama + R"(, "qk_layernorm": true})"))
              .find("config.json: qk_layernorm = true is not a field ztrain's llama reads") != std::string::npos);
  REQUIRE(refusal(write_config(root + "/gpt2_layer_scaled", R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2,
    "n_embd": 16, "vocab_size": 300, "n_positions": 32, "scale_attn_by_inverse_layer_idx": true})"))
              .find("scale_attn_by_inverse_layer_idx") != std::string::npos);
  // the fields of published configs that do not change the math load
  REQUIRE(rope_theta_of(write_config(root + "/published", llama + R"(, "architectures": ["LlamaForCausalLM"],
    "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001,
    "head_dim": 16, "hidden_act": "silu", "initializer_range": 0.02, "mlp_bias": false, "num_key_value_heads": 2,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 500000.0,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.45.0", "use_cache": true})"))
          == 500000.0);
  REQUIRE(refusal(write_config(root + "/gpt2_published", R"({"model_type": "gpt2", "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1,
    "eos_token_id": 50256, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "n_ctx": 1024, "n_embd": 768,
    "n_head": 12, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": null,
    "summary_first_dropout": 0.1, "summary_proj_to_labels": true, "summary_type": "cls_index",
    "summary_use_proj": true, "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
    "vocab_size": 50257})")) == "");
  // gpt2-medium's and full dumps' fields; empty objects say nothing
  REQUIRE(refusal(write_config(root + "/gpt2_medium", R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16,
    "vocab_size": 300, "n_positions": 32, "n_special": 0, "predict_special_tokens": true, "pruned_heads": {},
    "_num_labels": 1, "output_past": true, "gradient_checkpointing": false, "_attn_implementation_autoset": true,
    "use_bfloat16": false, "is_decoder": false, "typical_p": 1.0, "chunk_size_feed_forward": 0})")) == "");
  // pruned heads are another model; a key holding a '.' is named, not split (it crashed)
  REQUIRE(refusal(write_config(root + "/pruned", R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16,
    "vocab_size": 300, "n_positions": 32, "pruned_heads": {"0": [1]}})")).find("pruned_heads = ") != std::string::npos);
  REQUIRE(refusal(write_config(root + "/dotted", llama + R"(, "a.b": 1, "rope_parameters": {"x.y": 2,
    "rope_theta": 500000.0}})")).find("a.b = 1, rope_parameters.x.y = 2 are not fields") != std::string::npos);
  std::filesystem::remove_all(root);
}
