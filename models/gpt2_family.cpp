// The GPT-2 family's entry (engine/model/family.h): learned positions, LayerNorm, GELU MLP,
// output head tied to the token embedding; Hugging Face's GPT2LMHeadModel.
#include <memory>

#include "engine/comm/comm.h"
#include "engine/core/status.h"
#include "engine/model/family.h"
#include "models/gpt2.h"
#include "models/held_vocab.h"

namespace zt {

namespace {

GPT2Config gpt2_config(const RunSpec::Model& m, int tp, Recompute rc, bool sequence_parallel) {
  return GPT2Config{int(m.n_layer),    int(m.n_head),  int(m.d_model),         int(m.d_ff), int(m.vocab_size),
                    int(m.seq_len),    int(held_vocab(m, tp)), float(m.norm_eps), rc, sequence_parallel};
}

// GPT-2's Conv1D weights (Hugging Face keeps OpenAI's (in, out) layout).
bool conv1d(const std::string& name) {
  for (const char* s : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
    const std::string suffix(s);
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  }
  return false;
}

class Gpt2Family final : public ModelFamily {
 public:
  const char* name() const override { return "gpt2"; }

  void resolve(RunSpec::Model& m, const ModelKeyChecks& c) const override {
    if (m.d_ff == 0) m.d_ff = 4 * m.d_model;
    c.check(!c.given("n_kv_head") || m.n_kv_head == m.n_head, "n_kv_head",
            fmt::format("grouped-query attention (n_kv_head = {} < n_head = {}) needs a Llama-shaped arch "
                        "(\"llama\", \"mistral\", \"qwen2\", \"qwen3\")", m.n_kv_head, m.n_head));
    const char* rope_only = "applies to the Llama-shaped archs (gpt2 learns its position embeddings)";
    c.check(m.rope_theta == 10000.0, "rope_theta", rope_only);
    c.check(m.rope_scaling.empty(), "rope_scaling", rope_only);
    if (const char* k = m.rope_scaling_parameter_set())
      c.check(false, k, "applies to the Llama-shaped archs with rope_scaling = \"llama3\"");
    c.check(m.head_dim == 0 || m.head_dim * m.n_head == m.d_model, "head_dim",
            fmt::format("gpt2's heads are d_model / n_head = {} wide", m.d_model / m.n_head));
    c.check(m.tie_embeddings, "tie_embeddings",
            "gpt2's output head is its token embedding; false needs a Llama-shaped arch (\"llama\", \"mistral\", "
            "\"qwen2\", \"qwen3\")");
  }

  std::unique_ptr<Model> make(const RunSpec::Model& m, Backend& backend, int max_batch, Comm* tp,
                              Recompute rc, bool sequence_parallel, const RunSpec::Lora& lora) const override {
    GPT2Config c = gpt2_config(m, tp ? tp->size() : 1, rc, sequence_parallel);
    c.lora = lora;
    return std::make_unique<GPT2>(c, backend, max_batch, tp);
  }
  std::vector<std::string> lora_roles() const override { return GPT2::lora_roles(); }
  std::string lora_default_targets() const override { return "qkv"; }  // PEFT's c_attn

  std::vector<Backend::OpRequest> ops(const RunSpec::Model& m, DType compute) const override {
    const int hs = int(m.d_model / m.n_head);
    std::vector<Backend::OpRequest> out;
    for (const char* op : {"embedding_forward", "embedding_backward", "layernorm_forward", "residual_layernorm_forward",
                           "layernorm_backward", "matmul_forward", "matmul_gelu_forward", "matmul_backward",
                           "matmul_gelu_backward", "attention_forward", "attention_backward",
                           "add_rows_scaled", "gelu_forward", "dropout"})  // low-rank adapters'
      out.push_back({op, compute, hs});
    return out;
  }

  ModelFootprint footprint(const RunSpec::Model& m, int max_batch, int tp, size_t compute_size,
                           Recompute rc, bool sequence_parallel) const override {
    // doubles throughout: the shapes' products overflow int64 for absurd specs (the point of asking);
    // the sizes themselves are int32 (the spec checks d_ff and the padded vocabulary)
    const double L = double(m.n_layer), C = double(m.d_model), F = double(m.d_ff), V = double(held_vocab(m, tp));
    const double T = double(m.seq_len), P = double(tp);
    ModelFootprint f;
    // the parameter table of GPT2's constructor: vocabulary-parallel wte, replicated wpe and norms,
    // column-parallel c_attn and c_fc, row-parallel projections (their biases replicated)
    f.params = V * C / P + T * C + L * (4 * C + 3 * C * C / P + 3 * C / P + C * C / P + C + 2 * F * C / P + F / P + C) +
               2 * C;
    f.activation_bytes = GPT2::activation_footprint(gpt2_config(m, tp, rc, sequence_parallel), max_batch, tp,
                                                compute_size);
    return f;
  }

  double lora_params(const RunSpec::Model& m, const RunSpec::Lora& l) const override {
    if (!l.enabled()) return 0;
    return double(m.n_layer) * lora_block_params(GPT2::lora_sites(gpt2_config(m, 1, Recompute::None, false), 0), l);
  }
  double matmul_params(const RunSpec::Model& m) const override {
    const double C = double(m.d_model), F = double(m.d_ff);
    // per layer c_attn (3C x C), attn.c_proj, c_fc and mlp.c_proj; the head is the tied wte
    return double(m.n_layer) * (4 * C * C + 2 * F * C) + double(m.vocab_size) * C;
  }

  bool reads_hf_model_type(const std::string& type) const override { return type == "gpt2"; }

  std::vector<HfModelKey> read_hf_config(const HfConfigView& c) const override {
    const std::string act = c.string("activation_function", "gelu_new");
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      c.reject(fmt::format("activation_function = \"{}\": ztrain's GPT-2 uses the tanh GELU (gelu_new)", act));
    // the tied head, attention scaled by 1/sqrt(head size) only: transformers' other choices are
    // other models
    if (!c.boolean("tie_word_embeddings", true))
      c.reject("tie_word_embeddings = false: ztrain's GPT-2 ties its head to the token embedding");
    if (!c.boolean("scale_attn_weights", true))
      c.reject("scale_attn_weights = false: ztrain's GPT-2 scales attention by 1/sqrt(head size)");
    if (c.boolean("scale_attn_by_inverse_layer_idx", false))
      c.reject("scale_attn_by_inverse_layer_idx = true is not supported");
    // old configs' extra special-token rows (OpenAI GPT): none in the GPT-2 ztrain builds
    if (c.has("n_special") && c.integer("n_special") != 0)
      c.reject(fmt::format("n_special = {}: extra special-token rows are not supported", c.integer("n_special")));
    c.ignore("predict_special_tokens");
    for (const char* dropout : {"attn_pdrop", "embd_pdrop", "resid_pdrop"}) c.ignore(dropout);  // training only
    c.ignore("n_ctx");                    // the context of old configs: n_positions is read
    c.ignore("reorder_and_upcast_attn");  // the same attention with its product in fp32
    for (const char* head : {"summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
                             "summary_first_dropout"})
      c.ignore(head);  // GPT2DoubleHeadsModel's classifier head, not the language model
    const int64_t C = c.integer("n_embd");
    return {{"arch", std::string(name()), "model_type"},
            {"n_layer", c.integer("n_layer"), "n_layer"},
            {"n_head", c.integer("n_head"), "n_head"},
            {"d_model", C, "n_embd"},
            {"d_ff", c.has("n_inner") ? c.integer("n_inner") : 4 * C, "n_inner"},
            {"vocab_size", c.integer("vocab_size"), "vocab_size"},
            {"seq_len", c.integer("n_positions"), "n_positions", true},
            {"norm_eps", c.number("layer_norm_epsilon", 1e-5), "layer_norm_epsilon"}};
  }

  HfConfigFields hf_config(const RunSpec::Model& m, const char* torch_dtype) const override {
    return {{"architectures", std::vector<std::string>{"GPT2LMHeadModel"}},
            {"model_type", std::string(name())},
            {"n_layer", m.n_layer},
            {"n_head", m.n_head},
            {"n_embd", m.d_model},
            {"n_inner", m.d_ff},
            {"vocab_size", m.vocab_size},
            {"n_positions", m.seq_len},
            {"n_ctx", m.seq_len},
            {"layer_norm_epsilon", m.norm_eps},
            {"activation_function", std::string("gelu_new")},
            {"tie_word_embeddings", true},
            {"torch_dtype", std::string(torch_dtype)}};
  }

  bool hf_transposed(const std::string& n) const override { return conv1d(n); }
  bool hf_row_prefix(const std::string& n) const override { return n == "transformer.wpe.weight"; }
};

}  // namespace

const ModelFamily& gpt2_family() {
  static const Gpt2Family f;
  return f;
}

}  // namespace zt
