// Text generation from a model: temperature sampling with the counter-based generator.
#pragma once
#include <cstdint>
#include <vector>

#include "data/manifest.h"
#include "engine/backend/backend.h"
#include "engine/config/spec.h"
#include "engine/model/model.h"

namespace zt {

// Extends `prompt` (non-empty) by n_new tokens, each drawn from softmax(logits / temperature)
// over ids < n_vocab (the tokenizer's vocabulary, which may be smaller than the model's).
// The context is the last seq_len tokens. Deterministic for a given seed.
std::vector<uint32_t> generate(Model& model, Backend& backend, std::vector<uint32_t> prompt,
                               int n_new, double temperature, uint32_t n_vocab, uint64_t seed);

// [train] sample_tokens at the end of a run: generated from the end-of-text token by every rank
// (ZeRO-3's gathers are collective) and printed by rank 0, decoded when the tokenizer's
// vocabulary file is at hand (token ids otherwise).
void print_sample(Model& model, Backend& backend, const data::TokenizerInfo& tokenizer, const RunSpec::Train& t,
                  uint64_t seed, bool root);

}  // namespace zt
