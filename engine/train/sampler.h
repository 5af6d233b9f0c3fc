// Text generation from a model: temperature sampling with the counter-based generator.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/model.h"

namespace zt {

// Extends `prompt` (non-empty) by n_new tokens, each drawn from softmax(logits / temperature)
// over ids < n_vocab (the tokenizer's vocabulary, which may be smaller than the model's).
// The context is the last seq_len tokens. Deterministic for a given seed.
std::vector<uint32_t> generate(Model& model, Backend& backend, std::vector<uint32_t> prompt,
                               int n_new, double temperature, uint32_t n_vocab, uint64_t seed);

}  // namespace zt
