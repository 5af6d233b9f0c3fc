// Hugging Face config.json and names (see hf_config.h).
#include "engine/hf/hf_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/core/status.h"

namespace zt {

using json = nlohmann::json;

namespace {
// GPT-2's Conv1D weights (Hugging Face keeps OpenAI's (in, out) layout).
bool gpt2_conv1d(const std::string& name) {
  for (const char* s : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
    const std::string suffix(s);
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  }
  return false;
}
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
  auto integer = [&](const char* field) -> int64_t {
    if (!c.contains(field)) user_error("{}: no {}", path, field);
    if (!c[field].is_number_integer() || c[field].get<int64_t>() < 0 || c[field].get<int64_t>() > (int64_t(1) << 31))
      user_error("{}: {} = {} is not a size", path, field, c[field].dump());
    return c[field].get<int64_t>();
  };
  auto number = [&](const char* field, double dflt) -> double {
    if (!c.contains(field) || c[field].is_null()) return dflt;
    if (!c[field].is_number()) user_error("{}: {} = {} is not a number", path, field, c[field].dump());
    return c[field].get<double>();
  };
  auto string = [&](const char* field, const char* dflt) -> std::string {
    if (!c.contains(field) || c[field].is_null()) return dflt;
    if (!c[field].is_string()) user_error("{}: {} = {} is not a string", path, field, c[field].dump());
    return c[field].get<std::string>();
  };
  auto boolean = [&](const char* field, bool dflt) -> bool {
    if (!c.contains(field) || c[field].is_null()) return dflt;
    if (!c[field].is_boolean()) user_error("{}: {} = {} is not true or false", path, field, c[field].dump());
    return c[field].get<bool>();
  };
  const std::string type = string("model_type", "");
  std::vector<HfModelKey> k;
  if (type == "gpt2") {
    const std::string act = string("activation_function", "gelu_new");
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      user_error("{}: activation_function = \"{}\": ztrain's GPT-2 uses the tanh GELU (gelu_new)", path, act);
    const int64_t C = integer("n_embd");
    const bool inner = c.contains("n_inner") && !c["n_inner"].is_null();
    k = {{"arch", std::string("gpt2"), "model_type"},
         {"n_layer", integer("n_layer"), "n_layer"},
         {"n_head", integer("n_head"), "n_head"},
         {"d_model", C, "n_embd"},
         {"d_ff", inner ? integer("n_inner") : 4 * C, "n_inner"},
         {"vocab_size", integer("vocab_size"), "vocab_size"},
         {"seq_len", integer("n_positions"), "n_positions", true},
         {"norm_eps", number("layer_norm_epsilon", 1e-5), "layer_norm_epsilon"}};
    return k;
  }
  if (type == "llama" || type == "mistral") {
    const std::string act = string("hidden_act", "silu");
    if (act != "silu") user_error("{}: hidden_act = \"{}\": ztrain's Llama uses SwiGLU (silu)", path, act);
    if (c.contains("rope_scaling") && !c["rope_scaling"].is_null())
      user_error("{}: rope_scaling = {} is not supported (plain rotary embedding only)", path, c["rope_scaling"].dump());
    if (boolean("attention_bias", false) || boolean("mlp_bias", false))
      user_error("{}: attention_bias / mlp_bias: ztrain's Llama has no biases", path);
    if (c.contains("sliding_window") && !c["sliding_window"].is_null())
      user_error("{}: sliding_window = {} is not supported (full causal attention only)", path,
                 c["sliding_window"].dump());
    const int64_t C = integer("hidden_size"), NH = integer("num_attention_heads");
    if (c.contains("head_dim") && !c["head_dim"].is_null() && NH > 0 && integer("head_dim") * NH != C)
      user_error("{}: head_dim = {} is not hidden_size / num_attention_heads = {}", path, integer("head_dim"),
                 C / NH);
    k = {{"arch", std::string("llama"), "model_type"},
         {"n_layer", integer("num_hidden_layers"), "num_hidden_layers"},
         {"n_head", NH, "num_attention_heads"},
         {"n_kv_head", c.contains("num_key_value_heads") ? integer("num_key_value_heads") : NH, "num_key_value_heads"},
         {"d_model", C, "hidden_size"},
         {"d_ff", integer("intermediate_size"), "intermediate_size"},
         {"vocab_size", integer("vocab_size"), "vocab_size"},
         {"seq_len", integer("max_position_embeddings"), "max_position_embeddings", true},
         {"norm_eps", number("rms_norm_eps", 1e-6), "rms_norm_eps"},
         {"rope_theta", number("rope_theta", 10000.0), "rope_theta"},
         {"tie_embeddings", boolean("tie_word_embeddings", false), "tie_word_embeddings"}};
    return k;
  }
  user_error("{}: model_type = \"{}\" is not one ztrain builds (gpt2, llama)", path, type);
}

std::string hf_config_json(const RunSpec::Model& m, DType dtype) {
  const char* torch_dtype = dtype == DType::F32 ? "float32" : dtype == DType::BF16 ? "bfloat16" : "float16";
  json c;
  if (m.arch == "gpt2") {
    c = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"n_layer", m.n_layer},
         {"n_head", m.n_head}, {"n_embd", m.d_model}, {"n_inner", m.d_ff}, {"vocab_size", m.vocab_size},
         {"n_positions", m.seq_len}, {"n_ctx", m.seq_len}, {"layer_norm_epsilon", m.norm_eps},
         {"activation_function", "gelu_new"}, {"tie_word_embeddings", true}, {"torch_dtype", torch_dtype}};
  } else {
    c = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"num_hidden_layers", m.n_layer},
         {"num_attention_heads", m.n_head}, {"num_key_value_heads", m.n_kv_head}, {"hidden_size", m.d_model},
         {"intermediate_size", m.d_ff}, {"vocab_size", m.vocab_size}, {"max_position_embeddings", m.seq_len},
         {"rms_norm_eps", m.norm_eps}, {"rope_theta", m.rope_theta}, {"tie_word_embeddings", m.tie_embeddings},
         {"hidden_act", "silu"}, {"attention_bias", false}, {"mlp_bias", false}, {"rope_scaling", nullptr},
         {"torch_dtype", torch_dtype}};
  }
  return c.dump(2) + "\n";
}

HfName hf_name(const std::string& arch, const std::string& name) {
  // Our parameter names are Hugging Face's already (gpt2.h, llama.h); GPT-2's Conv1D weights
  // differ in layout only.
  return {name, arch == "gpt2" && gpt2_conv1d(name)};
}

}  // namespace zt
