// The Mistral family's entry: Mistral 7B v0.2+ and Nemo are Llama-shaped (models/llama.h) with
// full attention (v0.1's sliding window is refused); Nemo's head width is not d_model / n_head.
// Hugging Face's MistralForCausalLM.
#include "models/llama_family.h"

namespace zt {

namespace {

class MistralFamily final : public LlamaShapedFamily {
 public:
  MistralFamily() : LlamaShapedFamily({"mistral", "MistralForCausalLM"}) {}

 protected:
  void read_family_fields(const HfConfigView& c) const override { full_attention_only(c, false); }
  // as Mistral's v0.3 and Nemo files on the Hub: sliding_window null
  void write_family_fields(const RunSpec::Model&, HfConfigFields& out) const override {
    out.push_back({"sliding_window", nullptr});
  }
};

}  // namespace

const ModelFamily& mistral_family() {
  static const MistralFamily f;
  return f;
}

}  // namespace zt
