// Autoregressive sampling: one forward over the current context per new token.
#include "engine/train/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "engine/core/rng.h"
#include "data/tokenizer/tokenizer.h"
#include "engine/core/status.h"

namespace zt {

std::vector<uint32_t> generate(Model& model, Backend& backend, std::vector<uint32_t> tokens,
                               int n_new, double temperature, uint32_t n_vocab, uint64_t seed) {
  ZT_CHECK(!tokens.empty(), "generation needs a prompt of at least one token");
  const int T = model.seq_len(), V = model.vocab_size();
  const uint32_t usable = std::min<uint32_t>(n_vocab, uint32_t(V));
  const uint64_t stream = name_hash("sample");
  std::vector<int32_t> ctx;
  std::vector<float> row(V);
  std::vector<double> prob(usable);
  for (int i = 0; i < n_new; ++i) {
    const size_t len = std::min<size_t>(tokens.size(), size_t(T));
    ctx.assign(tokens.end() - len, tokens.end());
    model.forward(ctx.data(), nullptr, 1, int(len), 0.0f);
    model.logits_row(0, int(len - 1), row.data());
    double mx = -INFINITY, sum = 0;
    for (uint32_t v = 0; v < usable; ++v) mx = std::max(mx, double(row[v]) / temperature);
    for (uint32_t v = 0; v < usable; ++v) sum += prob[v] = std::exp(double(row[v]) / temperature - mx);
    const Philox4 r = philox4x32(seed, uint64_t(i), stream);
    double u = uniform_from_bits(r.v[0]) * sum, acc = 0;
    uint32_t next = usable - 1;
    for (uint32_t v = 0; v < usable; ++v) {
      acc += prob[v];
      if (u <= acc) {
        next = v;
        break;
      }
    }
    tokens.push_back(next);
  }
  return tokens;
}

void print_sample(Model& model, Backend& backend, const data::TokenizerInfo& info, const RunSpec::Train& t,
                  uint64_t seed, bool root) {
  std::optional<data::Tokenizer> tok;
  if (info.kind == "byte") tok = data::Tokenizer::byte_level();
  else if (!info.vocab_file.empty() && std::filesystem::exists(info.vocab_file))
    tok = data::Tokenizer::from_tiktoken(info.vocab_file);
  const auto out = generate(model, backend, {info.eot}, int(t.sample_tokens), t.sample_temperature, info.n_vocab, seed);
  if (!root) return;
  std::vector<uint32_t> gen(out.begin() + 1, out.end());
  std::printf("---- sample (%lld tokens, temperature %.2f) ----\n", (long long)t.sample_tokens, t.sample_temperature);
  if (tok) {
    const std::string text = tok->decode(gen);
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    for (auto id : gen) std::printf("%u ", id);
  }
  std::printf("\n---- end of sample ----\n");
  std::fflush(stdout);
}

}  // namespace zt
