// The Llama family's entry (engine/model/family.h): rotary positions, RMSNorm, SwiGLU MLP,
// grouped-query attention, optionally tied head; Hugging Face's LlamaForCausalLM (and Mistral's
// config without a sliding window).
#include <algorithm>
#include <memory>

#include "engine/comm/comm.h"
#include "engine/core/status.h"
#include "engine/model/family.h"
#include "models/held_vocab.h"
#include "models/llama.h"

namespace zt {

namespace {

LlamaConfig llama_config(const RunSpec::Model& m, int tp, Recompute rc, bool sequence_parallel) {
  LlamaConfig c;
  c.sequence_parallel = sequence_parallel;
  c.n_layer = int(m.n_layer);
  c.n_head = int(m.n_head);
  c.n_kv_head = int(m.n_kv_head);
  c.d_model = int(m.d_model);
  c.d_ff = int(m.d_ff);
  c.vocab_size = int(m.vocab_size);
  c.seq_len = int(m.seq_len);
  c.vocab_padded = int(held_vocab(m, tp));
  c.rope_theta = float(m.rope_theta);
  if (m.rope_scaling == "llama3")
    c.rope_scaling = {float(m.rope_scaling_factor), float(m.rope_scaling_low_freq_factor),
                      float(m.rope_scaling_high_freq_factor), float(m.rope_scaling_original_max_positions)};
  c.norm_eps = float(m.norm_eps);
  c.tie_embeddings = m.tie_embeddings;
  c.recompute = rc;
  return c;
}

class LlamaFamily final : public ModelFamily {
 public:
  const char* name() const override { return "llama"; }

  void resolve(RunSpec::Model& m, const ModelKeyChecks& c) const override {
    // The default MLP width: 2/3 of 4 d_model (SwiGLU has three matrices, not two), rounded up to
    // a multiple of 256 as Meta's reference code does.
    if (m.d_ff == 0) m.d_ff = ((8 * m.d_model / 3) + 255) / 256 * 256;
    c.check((m.d_model / m.n_head) % 2 == 0, "n_head",
            fmt::format("the rotary embedding needs an even head size; d_model / n_head = {} / {} = {}", m.d_model,
                        m.n_head, m.d_model / m.n_head));
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

  std::unique_ptr<Model> make(const RunSpec::Model& m, Backend& backend, int max_batch, Comm* tp,
                              Recompute rc, bool sequence_parallel) const override {
    return std::make_unique<Llama>(llama_config(m, tp ? tp->size() : 1, rc, sequence_parallel), backend, max_batch, tp);
  }

  std::vector<Backend::OpRequest> ops(const RunSpec::Model& m, DType compute) const override {
    const int hs = int(m.d_model / m.n_head);
    std::vector<Backend::OpRequest> out;
    for (const char* op : {"embedding_forward", "embedding_backward", "rmsnorm_forward", "residual_rmsnorm_forward",
                           "rmsnorm_backward", "rope", "swiglu_forward", "swiglu_backward", "matmul_forward",
                           "matmul_backward", "add", "attention_forward", "attention_backward"})
      out.push_back({op, compute, hs});
    return out;
  }

  ModelFootprint footprint(const RunSpec::Model& m, int max_batch, int tp, size_t compute_size,
                           Recompute rc, bool sequence_parallel) const override {
    const double L = double(m.n_layer), C = double(m.d_model), F = double(m.d_ff), V = double(held_vocab(m, tp));
    const double P = double(tp), hs = C / double(m.n_head);
    const double KVl = std::max(1.0, double(m.n_kv_head) / P) * hs;  // replicated when tp > n_kv_head
    ModelFootprint f;
    // the parameter table of Llama's constructor: vocabulary-parallel embedding (and head when
    // untied), replicated norms, column-parallel q/k/v and gate/up, row-parallel o and down
    f.params = V * C / P * (m.tie_embeddings ? 1 : 2) + C +
               L * (2 * C + C * C / P + 2 * KVl * C + C * C / P + 3 * F * C / P);
    f.activation_bytes = Llama::activation_footprint(llama_config(m, tp, rc, sequence_parallel), max_batch, tp,
                                                compute_size);
    return f;
  }

  double matmul_params(const RunSpec::Model& m) const override {
    const double C = double(m.d_model), F = double(m.d_ff), KV = double(m.n_kv_head) * C / double(m.n_head);
    // per layer q and o (C x C), k and v (KV x C), gate, up and down; the head (tied or not)
    return double(m.n_layer) * (2 * C * C + 2 * KV * C + 3 * F * C) + double(m.vocab_size) * C;
  }

  bool reads_hf_model_type(const std::string& type) const override { return type == "llama" || type == "mistral"; }

  // The rotary base in either spelling: transformers v4's top-level rope_theta, or v5's
  // rope_parameters = {rope_type, rope_theta, and the scaling's fields}.
  static double rope_theta(const HfConfigView& c) {
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
  static void rope_scaling(const HfConfigView& c, std::vector<HfModelKey>& keys) {
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

  std::vector<HfModelKey> read_hf_config(const HfConfigView& c) const override {
    const std::string act = c.string("hidden_act", "silu");
    if (act != "silu") c.reject(fmt::format("hidden_act = \"{}\": ztrain's Llama uses SwiGLU (silu)", act));
    c.ignore("attention_dropout");  // dropout in training only: ztrain trains without it
    c.ignore("pretraining_tp");     // transformers splits the same products into slices
    if (c.boolean("attention_bias", false) || c.boolean("mlp_bias", false))
      c.reject("attention_bias / mlp_bias: ztrain's Llama has no biases");
    if (c.has("sliding_window"))
      c.reject(fmt::format("sliding_window = {} is not supported (full causal attention only)",
                           c.json("sliding_window")));
    const int64_t C = c.integer("hidden_size"), NH = c.integer("num_attention_heads");
    if (c.has("head_dim") && NH > 0 && c.integer("head_dim") * NH != C)
      c.reject(fmt::format("head_dim = {} is not hidden_size / num_attention_heads = {}", c.integer("head_dim"),
                           C / NH));
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
            {"rope_theta", rope_theta(c), "rope_theta"},
            {"tie_embeddings", c.boolean("tie_word_embeddings", false), "tie_word_embeddings"}};
    rope_scaling(c, keys);
    return keys;
  }

  HfConfigFields hf_config(const RunSpec::Model& m, const char* torch_dtype) const override {
    HfConfigFields out = {{"architectures", std::vector<std::string>{"LlamaForCausalLM"}},
            {"model_type", std::string(name())},
            {"num_hidden_layers", m.n_layer},
            {"num_attention_heads", m.n_head},
            {"num_key_value_heads", m.n_kv_head},
            {"hidden_size", m.d_model},
            {"intermediate_size", m.d_ff},
            {"vocab_size", m.vocab_size},
            {"max_position_embeddings", m.seq_len},
            {"rms_norm_eps", m.norm_eps},
            {"rope_theta", m.rope_theta},
            {"tie_word_embeddings", m.tie_embeddings},
            {"hidden_act", std::string("silu")},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"torch_dtype", std::string(torch_dtype)}};
    const HfConfigFields scaling = hf_rope_scaling(m);
    out.insert(out.end(), scaling.begin(), scaling.end());
    return out;
  }
  // config.json's rope_scaling as Meta's Llama 3.1-3.3 files on the Hub spell it (transformers
  // v4: an object with rope_type), or null.
  static HfConfigFields hf_rope_scaling(const RunSpec::Model& m) {
    if (m.rope_scaling.empty()) return {{"rope_scaling", nullptr}};
    return {{"rope_scaling.rope_type", m.rope_scaling},
            {"rope_scaling.factor", m.rope_scaling_factor},
            {"rope_scaling.low_freq_factor", m.rope_scaling_low_freq_factor},
            {"rope_scaling.high_freq_factor", m.rope_scaling_high_freq_factor},
            {"rope_scaling.original_max_position_embeddings", m.rope_scaling_original_max_positions}};
  }
};

}  // namespace

const ModelFamily& llama_family() {
  static const LlamaFamily f;
  return f;
}

}  // namespace zt
