// The Qwen families' entries, Llama-shaped (models/llama.h): Qwen2/2.5 put biases on q, k and v
// (never on o or the MLP); Qwen3 (dense) has none but normalizes each q and k head with an RMSNorm
// before RoPE, and its head width is its own (head_dim; 128 where d_model / n_head is 64).
// Hugging Face's Qwen2ForCausalLM and Qwen3ForCausalLM.
#include "models/llama_family.h"

namespace zt {

namespace {

// Qwen's configs carry a sliding window that use_sliding_window = false leaves unused; export
// writes it off (sliding_window null, max_window_layers every layer) as transformers saves it.
void write_full_attention(const RunSpec::Model& m, HfConfigFields& out) {
  out.push_back({"use_sliding_window", false});
  out.push_back({"sliding_window", nullptr});
  out.push_back({"max_window_layers", m.n_layer});
}

class Qwen2Family final : public LlamaShapedFamily {
 public:
  Qwen2Family() : LlamaShapedFamily({"qwen2", "Qwen2ForCausalLM", /*qkv_bias=*/true, /*qk_norm=*/false}) {}

 protected:
  void read_family_fields(const HfConfigView& c) const override {
    full_attention_only(c, true);
    // Qwen2-VL's multimodal RoPE; false in some text models' files (DeepSeek-R1-Distill-Qwen)
    if (c.boolean("use_mrope", false)) c.reject("use_mrope = true: ztrain builds text RoPE (Qwen2-VL's is not)");
  }
  void write_family_fields(const RunSpec::Model& m, HfConfigFields& out) const override {
    write_full_attention(m, out);
  }
};

class Qwen3Family final : public LlamaShapedFamily {
 public:
  Qwen3Family() : LlamaShapedFamily({"qwen3", "Qwen3ForCausalLM", /*qkv_bias=*/false, /*qk_norm=*/true}) {}

 protected:
  void read_family_fields(const HfConfigView& c) const override { full_attention_only(c, true); }
  void write_family_fields(const RunSpec::Model& m, HfConfigFields& out) const override {
    out.push_back({"attention_bias", false});
    write_full_attention(m, out);
  }
};

}  // namespace

const ModelFamily& qwen2_family() {
  static const Qwen2Family f;
  return f;
}

const ModelFamily& qwen3_family() {
  static const Qwen3Family f;
  return f;
}

}  // namespace zt
