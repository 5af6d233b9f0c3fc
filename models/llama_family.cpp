// The Llama-shaped families' shared entry (models/llama_family.h) and Llama's own: rotary
// positions, RMSNorm, SwiGLU MLP, grouped-query attention, optionally tied head; Hugging Face's
// LlamaForCausalLM (Llama 2, 3 and 3.1-3.3 with their RoPE scaling).
#include "models/llama_family.h"

#include <algorithm>
#include <memory>

#include "engine/comm/comm.h"
#include "engine/core/status.h"
#include "models/held_vocab.h"
#include "models/llama.h"

namespace zt {

namespace {

LlamaConfig llama_config(const RunSpec::Model& m, const LlamaShape& shape, int tp, Recompute rc,
                         bool sequence_parallel) {
  LlamaConfig c;
  c.family = shape.name;
  c.sequence_parallel = sequence_parallel;
  c.n_layer = int(m.n_layer);
  c.n_head = int(m.n_head);
  c.n_kv_head = int(m.n_kv_head);
  c.d_model = int(m.d_model);
  c.d_ff = int(m.d_ff);
  c.vocab_size = int(m.vocab_size);
  c.seq_len = int(m.seq_len);
  c.vocab_padded = int(held_vocab(m, tp));
  c.head_dim = int(m.head_dim);
  c.qkv_bias = shape.qkv_bias;
  c.qk_norm = shape.qk_norm;
  c.rope_theta = float(m.rope_theta);
  if (m.rope_scaling == "llama3")
    c.rope_scaling = {float(m.rope_scaling_factor), float(m.rope_scaling_low_freq_factor),
                      float(m.rope_scaling_high_freq_factor), float(m.rope_scaling_original_max_positions)};
  c.norm_eps = float(m.norm_eps);
  c.tie_embeddings = m.tie_embeddings;
  c.recompute = rc;
  return c;
}

// The rotary base in either spelling: transformers v4's top-level rope_theta, or v5's
// rope_parameters = {rope_type, rope_theta, and the scaling's fields}.
double read_rope_theta(const HfConfigView& c) {
  const double top = c.number("rope_theta", 10000.0);
  if (!c.has("rope_parameters")) return top;
  const double inner = c.number("rope_parameters.rope_theta", top);
  if (c.has("rope_theta") && inner != top)
    c.reject(fmt::format("rope_theta = {} and rope_parameters.rope_theta = {} disagree", top, inner));
  return inner;
}

// RoPE scaling in either spelling: v4's rope_scaling = {rope_type (or the older "type"), factor,
// low_freq_factor, high_freq_factor, original_max_position_embeddings}, or the same fields in
// v5's rope_parameters. "default" is none; "llama3" is built; any other type is refused by name,
// and so is any field of the object not read here (read_hf_config's caller names it).
void read_rope_scaling(const HfConfigView& c, std::vector<HfModelKey>& keys) {
  const bool v5 = c.has("rope_parameters");
  const std::string at = v5 ? "rope_parameters" : "rope_scaling";
  if (v5 && c.has("rope_scaling"))
    c.reject(fmt::format("both rope_scaling = {} and rope_parameters = {}: one spelling only", c.json("rope_scaling"),
                         c.json("rope_parameters")));
  auto field = [&](const char* f) { return at + "." + f; };
  std::string type = "default";
  if (c.has(at.c_str())) {
    type = c.string(field("rope_type").c_str(), "");
    const std::string older = c.string(field("type").c_str(), "");
    if (!older.empty() && !type.empty() && older != type)
      c.reject(fmt::format("{}.rope_type = \"{}\" and {}.type = \"{}\" disagree", at, type, at, older));
    if (type.empty()) type = older.empty() ? "default" : older;
  }
  if (type == "default") {
    keys.push_back({"rope_scaling", std::string(), at});
    return;
  }
  if (type != "llama3")
    c.reject(fmt::format("{}.rope_type = \"{}\" is not supported: ztrain builds plain RoPE and Llama 3.1's "
                         "\"llama3\" scaling ({} = {})", at, type, at, c.json(at.c_str())));
  auto number = [&](const char* f) {
    if (!c.has(field(f).c_str())) c.reject(fmt::format("{}: rope_type \"llama3\" without {}", at, field(f)));
    return c.number(field(f).c_str(), 0);
  };
  keys.push_back({"rope_scaling", std::string("llama3"), field("rope_type")});
  keys.push_back({"rope_scaling_factor", number("factor"), field("factor")});
  keys.push_back({"rope_scaling_low_freq_factor", number("low_freq_factor"), field("low_freq_factor")});
  keys.push_back({"rope_scaling_high_freq_factor", number("high_freq_factor"), field("high_freq_factor")});
  keys.push_back({"rope_scaling_original_max_positions", c.integer(field("original_max_position_embeddings").c_str()),
                  field("original_max_position_embeddings")});
}

// config.json's rope_scaling as Meta's Llama 3.1-3.3 files on the Hub spell it (transformers
// v4: an object with rope_type), or null.
HfConfigFields hf_rope_scaling(const RunSpec::Model& m) {
  if (m.rope_scaling.empty()) return {{"rope_scaling", nullptr}};
  return {{"rope_scaling.rope_type", m.rope_scaling},
          {"rope_scaling.factor", m.rope_scaling_factor},
          {"rope_scaling.low_freq_factor", m.rope_scaling_low_freq_factor},
          {"rope_scaling.high_freq_factor", m.rope_scaling_high_freq_factor},
          {"rope_scaling.original_max_position_embeddings", m.rope_scaling_original_max_positions}};
}

}  // namespace

void LlamaShapedFamily::resolve(RunSpec::Model& m, const ModelKeyChecks& c) const {
  // The default MLP width: 2/3 of 4 d_model (SwiGLU has three matrices, not two), rounded up to
  // a multiple of 256 as Meta's reference code does.
  if (m.d_ff == 0) m.d_ff = ((8 * m.d_model / 3) + 255) / 256 * 256;
  c.check(m.head_size() % 2 == 0, m.head_dim > 0 ? "head_dim" : "n_head",
          fmt::format("the rotary embedding needs an even head size; {}", m.head_dim > 0
                          ? fmt::format("head_dim = {}", m.head_dim)
                          : fmt::format("d_model / n_head = {} / {} = {}", m.d_model, m.n_head, m.head_size())));
  if (!c.given("tie_embeddings")) m.tie_embeddings = false;  // Llama's default
  // RoPE scaling: Llama 3.1's rule, or none; its parameters only with it (a factor given alone
  // would be silently unused)
  c.check(m.rope_scaling.empty() || m.rope_scaling == "llama3", "rope_scaling",
          fmt::format("\"{}\" is not a scaling ztrain builds: \"llama3\" (Llama 3.1-3.3), or \"\" for none "
                      "(linear, dynamic, yarn and longrope are not implemented)", m.rope_scaling));
  if (const char* k = m.rope_scaling_parameter_set())
    c.check(!m.rope_scaling.empty(), k, "applies only with rope_scaling = \"llama3\"");
  c.check(m.rope_scaling.empty() || m.rope_scaling_low_freq_factor < m.rope_scaling_high_freq_factor,
          "rope_scaling_low_freq_factor",
          fmt::format("{} must be below rope_scaling_high_freq_factor = {} (the band between them is interpolated)",
                      m.rope_scaling_low_freq_factor, m.rope_scaling_high_freq_factor));
}

std::unique_ptr<Model> LlamaShapedFamily::make(const RunSpec::Model& m, Backend& backend, int max_batch, Comm* tp,
                                               Recompute rc, bool sequence_parallel, const RunSpec::Lora& lora) const {
  LlamaConfig c = llama_config(m, shape_, tp ? tp->size() : 1, rc, sequence_parallel);
  c.lora = lora;
  return std::make_unique<Llama>(c, backend, max_batch, tp);
}

std::vector<std::string> LlamaShapedFamily::lora_roles() const { return Llama::lora_roles(); }

std::vector<Backend::OpRequest> LlamaShapedFamily::ops(const RunSpec::Model& m, DType compute) const {
  const int hs = int(m.head_size());
  std::vector<Backend::OpRequest> out;
  for (const char* op : {"embedding_forward", "embedding_backward", "rmsnorm_forward", "residual_rmsnorm_forward",
                         "rmsnorm_backward", "rope", "swiglu_forward", "swiglu_backward", "matmul_forward",
                         "matmul_backward", "add", "attention_forward", "attention_backward",
                         "add_rows_scaled", "dropout"})  // low-rank adapters'
    out.push_back({op, compute, hs});
  if (shape_.qk_norm)
    for (const char* op : {"head_rmsnorm_forward", "head_rmsnorm_backward"}) out.push_back({op, compute, hs});
  return out;
}

ModelFootprint LlamaShapedFamily::footprint(const RunSpec::Model& m, int max_batch, int tp, size_t compute_size,
                                            Recompute rc, bool sequence_parallel) const {
  const double L = double(m.n_layer), C = double(m.d_model), F = double(m.d_ff), V = double(held_vocab(m, tp));
  const double P = double(tp), hs = double(m.head_size()), Q = double(m.n_head) * hs;
  const double KVl = std::max(1.0, double(m.n_kv_head) / P) * hs;  // replicated when tp > n_kv_head
  ModelFootprint f;
  // the parameter table of Llama's constructor: vocabulary-parallel embedding (and head when
  // untied), replicated norms (the q/k norms too), column-parallel q/k/v (and their biases) and
  // gate/up, row-parallel o and down
  f.params = V * C / P * (m.tie_embeddings ? 1 : 2) + C +
             L * (2 * C + Q * C / P + 2 * KVl * C + C * Q / P + 3 * F * C / P +
                  (shape_.qkv_bias ? Q / P + 2 * KVl : 0) + (shape_.qk_norm ? 2 * hs : 0));
  f.activation_bytes = Llama::activation_footprint(llama_config(m, shape_, tp, rc, sequence_parallel), max_batch, tp,
                                                   compute_size);
  return f;
}

double LlamaShapedFamily::matmul_params(const RunSpec::Model& m) const {
  const double C = double(m.d_model), F = double(m.d_ff), hs = double(m.head_size());
  const double Q = double(m.n_head) * hs, KV = double(m.n_kv_head) * hs;
  // per layer q and o (Q x C), k and v (KV x C), gate, up and down; the head (tied or not)
  return double(m.n_layer) * (2 * Q * C + 2 * KV * C + 3 * F * C) + double(m.vocab_size) * C;
}

double LlamaShapedFamily::lora_params(const RunSpec::Model& m, const RunSpec::Lora& l) const {
  if (!l.enabled()) return 0;
  return double(m.n_layer) * lora_block_params(Llama::lora_sites(llama_config(m, shape_, 1, Recompute::None, false), 0, 1), l);
}

void LlamaShapedFamily::full_attention_only(const HfConfigView& c, bool has_use_flag) {
  const bool used = has_use_flag && c.boolean("use_sliding_window", false);
  if (has_use_flag && !used) {
    c.ignore("sliding_window");     // its size, unused while use_sliding_window is false
    c.ignore("max_window_layers");  // the layers it would apply to
  }
  if ((!has_use_flag || used) && c.has("sliding_window"))
    c.reject(fmt::format("sliding_window = {}{} is not supported (full causal attention only)",
                         c.json("sliding_window"), used ? " with use_sliding_window = true" : ""));
  if (c.has("layer_types")) {  // transformers v5: each layer's attention, all "full_attention" here
    std::string rest = c.json("layer_types");
    for (size_t at; (at = rest.find("\"full_attention\"")) != std::string::npos;) rest.erase(at, 16);
    if (rest.find_first_not_of("[], \n") != std::string::npos)
      c.reject(fmt::format("layer_types = {}: ztrain builds full attention in every layer", c.json("layer_types")));
  }
}

std::vector<HfModelKey> LlamaShapedFamily::read_hf_config(const HfConfigView& c) const {
  const std::string act = c.string("hidden_act", "silu");
  if (act != "silu") c.reject(fmt::format("hidden_act = \"{}\": ztrain's {} uses SwiGLU (silu)", act, name()));
  c.ignore("attention_dropout");  // dropout in training only: ztrain trains without it
  if (!shape_.qkv_bias && (c.boolean("attention_bias", false) || c.boolean("mlp_bias", false)))
    c.reject(fmt::format("attention_bias / mlp_bias: ztrain's {} has no biases", name()));
  const int64_t C = c.integer("hidden_size"), NH = c.integer("num_attention_heads");
  std::vector<HfModelKey> keys = {{"arch", std::string(name()), "model_type"},
          {"n_layer", c.integer("num_hidden_layers"), "num_hidden_layers"},
          {"n_head", NH, "num_attention_heads"},
          {"n_kv_head", c.contains("num_key_value_heads") ? c.integer("num_key_value_heads") : NH,
           "num_key_value_heads"},
          {"d_model", C, "hidden_size"},
          {"d_ff", c.integer("intermediate_size"), "intermediate_size"},
          {"vocab_size", c.integer("vocab_size"), "vocab_size"},
          {"seq_len", c.integer("max_position_embeddings"), "max_position_embeddings", true},
          {"norm_eps", c.number("rms_norm_eps", 1e-6), "rms_norm_eps"},
          {"rope_theta", read_rope_theta(c), "rope_theta"},
          {"tie_embeddings", c.boolean("tie_word_embeddings", false), "tie_word_embeddings"}};
  if (c.has("head_dim")) keys.push_back({"head_dim", c.integer("head_dim"), "head_dim"});
  read_rope_scaling(c, keys);
  read_family_fields(c);
  return keys;
}

HfConfigFields LlamaShapedFamily::hf_config(const RunSpec::Model& m, const char* torch_dtype) const {
  HfConfigFields out = {{"architectures", std::vector<std::string>{shape_.hf_class}},
          {"model_type", std::string(name())},
          {"num_hidden_layers", m.n_layer},
          {"num_attention_heads", m.n_head},
          {"num_key_value_heads", m.n_kv_head},
          {"hidden_size", m.d_model},
          {"head_dim", m.head_size()},
          {"intermediate_size", m.d_ff},
          {"vocab_size", m.vocab_size},
          {"max_position_embeddings", m.seq_len},
          {"rms_norm_eps", m.norm_eps},
          {"rope_theta", m.rope_theta},
          {"tie_word_embeddings", m.tie_embeddings},
          {"hidden_act", std::string("silu")},
          {"torch_dtype", std::string(torch_dtype)}};
  const HfConfigFields scaling = hf_rope_scaling(m);
  out.insert(out.end(), scaling.begin(), scaling.end());
  write_family_fields(m, out);
  return out;
}

namespace {

// Llama 2/3 (and 3.1-3.3 with their RoPE scaling), as Meta's files on the Hub spell config.json.
class LlamaFamily final : public LlamaShapedFamily {
 public:
  LlamaFamily() : LlamaShapedFamily({"llama", "LlamaForCausalLM"}) {}

 protected:
  void read_family_fields(const HfConfigView& c) const override {
    c.ignore("pretraining_tp");  // transformers splits the same products into slices
    full_attention_only(c, false);
  }
  void write_family_fields(const RunSpec::Model&, HfConfigFields& out) const override {
    out.push_back({"attention_bias", false});
    out.push_back({"mlp_bias", false});
  }
};

}  // namespace

const ModelFamily& llama_family() {
  static const LlamaFamily f;
  return f;
}

}  // namespace zt
