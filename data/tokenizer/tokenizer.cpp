// Tokenizer front end: loading (byte / tiktoken + meta.json), parallel encode, decode.
#include "data/tokenizer/tokenizer.h"

#include <omp.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "data/tokenizer/bpe.h"
#include "engine/core/status.h"

namespace zt::data {

namespace {
std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) user_error("{}: cannot open {}", path, what);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::byte_level() {
  Tokenizer t;
  t.kind_ = "byte";
  t.name_ = "byte";
  t.n_vocab_ = 257;
  t.eot_ = 256;
  t.specials_ = {{"<|endoftext|>", 256}};
  return t;
}

Tokenizer Tokenizer::from_tiktoken(const std::string& path) {
  const std::string suffix = ".tiktoken";
  if (path.size() <= suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
    user_error("{}: a BPE vocabulary must be a .tiktoken file (with a .meta.json beside it)", path);
  const std::string meta_path = path.substr(0, path.size() - suffix.size()) + ".meta.json";
  const std::string ranks = read_file(path, "BPE ranks");
  nlohmann::json meta = nlohmann::json::parse(read_file(meta_path, "tokenizer metadata"), nullptr, false);
  if (meta.is_discarded() || !meta.is_object() || !meta.contains("pat_str") ||
      !meta["pat_str"].is_string() || !meta.contains("special_tokens") ||
      !meta["special_tokens"].is_object())
    user_error("{}: expected a JSON object with \"pat_str\" and \"special_tokens\"", meta_path);
  Tokenizer t;
  t.kind_ = "bpe";
  t.vocab_file_ = path;
  t.name_ = std::filesystem::path(path).stem().string();
  t.bpe_ = std::make_unique<BpeRanks>(ranks, meta["pat_str"].get<std::string>(), path);
  // Checked as tiktoken's loader checks (a truncated or edited rank file must not go unnoticed,
  // or the manifest records a wrong n_vocab): special ids unique and clear of the ranks, and,
  // when the meta gives n_vocab, ranks + specials == n_vocab with no id at or above it.
  uint32_t n_vocab = t.bpe_->n_ranks();
  bool have_eot = false;
  for (auto& [text, id] : meta["special_tokens"].items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= (1u << 31))
      user_error("{}: special token {} needs a non-negative integer id", meta_path, text);
    const uint32_t v = id.get<uint32_t>();
    if (v < t.bpe_->n_ranks() && !t.bpe_->decoder()[v].empty())
      user_error("{}: special token {} has id {}, which {} already gives to a normal token", meta_path, text, v, path);
    for (const auto& [other, other_id] : t.specials_)
      if (other_id == v) user_error("{}: special tokens {} and {} share id {}", meta_path, other, text, v);
    t.specials_.emplace_back(text, v);
    n_vocab = std::max(n_vocab, v + 1);
    if (text == "<|endoftext|>") t.eot_ = v, have_eot = true;
  }
  if (!have_eot) user_error("{}: no <|endoftext|> special token", meta_path);
  if (meta.contains("n_vocab") && !meta["n_vocab"].is_null()) {
    if (!meta["n_vocab"].is_number_unsigned())
      user_error("{}: \"n_vocab\" must be a non-negative integer or null", meta_path);
    const uint64_t declared = meta["n_vocab"].get<uint64_t>();
    const uint64_t given = t.bpe_->n_tokens() + t.specials_.size();
    if (given != declared || n_vocab != declared)
      user_error("{}: \"n_vocab\" is {}, but {} holds {} ranks (highest {}) and the meta {} special tokens "
                 "(highest id {}): a truncated or mismatched rank file?", meta_path, declared, path,
                 t.bpe_->n_tokens(), t.bpe_->n_ranks() - 1, t.specials_.size(), n_vocab - 1);
  }
  t.n_vocab_ = n_vocab;
  return t;
}

Tokenizer Tokenizer::load(const std::string& vocab) {
  return vocab == "byte" ? byte_level() : from_tiktoken(vocab);
}

std::vector<uint32_t> Tokenizer::encode_ordinary(std::string_view text, int threads) const {
  std::vector<uint32_t> out;
  if (!bpe_) {
    out.assign(reinterpret_cast<const uint8_t*>(text.data()),
               reinterpret_cast<const uint8_t*>(text.data()) + text.size());
    return out;
  }
  std::vector<std::pair<size_t, size_t>> pieces;
  bpe_->split(text, pieces);
  // Pieces are independent: contiguous chunks go to threads, each with its own cache of
  // recently seen pieces (natural text repeats words), and the outputs are joined in order.
  const int n_chunks = std::max(1, std::min<int>(threads, int(pieces.size() / 256) + 1));
  std::vector<std::vector<uint32_t>> chunk_out(n_chunks);
#pragma omp parallel for num_threads(n_chunks) schedule(static, 1)
  for (int c = 0; c < n_chunks; ++c) {
    const size_t begin = pieces.size() * c / n_chunks, end = pieces.size() * (c + 1) / n_chunks;
    std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;  // piece -> [off, len)
    std::vector<uint32_t>& o = chunk_out[c];
    for (size_t i = begin; i < end; ++i) {
      const std::string_view piece = text.substr(pieces[i].first, pieces[i].second);
      if (auto it = cache.find(piece); it != cache.end()) {
        const auto [off, len] = it->second;
        for (uint32_t k = 0; k < len; ++k) o.push_back(o[off + k]);
        continue;
      }
      const size_t before = o.size();
      bpe_->encode_piece(piece, o);
      if (cache.size() < (1u << 16)) cache.emplace(piece, std::make_pair(uint32_t(before), uint32_t(o.size() - before)));
    }
  }
  size_t total = 0;
  for (const auto& c : chunk_out) total += c.size();
  out.reserve(total);
  for (const auto& c : chunk_out) out.insert(out.end(), c.begin(), c.end());
  return out;
}

std::vector<uint32_t> Tokenizer::encode_with_special(std::string_view text, int threads) const {
  std::vector<uint32_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    // Earliest special token at or after pos (longest on ties).
    size_t best = std::string_view::npos, best_len = 0;
    uint32_t best_id = 0;
    for (const auto& [s, id] : specials_) {
      const size_t at = text.find(s, pos);
      if (at != std::string_view::npos && (at < best || (at == best && s.size() > best_len)))
        best = at, best_len = s.size(), best_id = id;
    }
    const size_t stop = best == std::string_view::npos ? text.size() : best;
    auto part = encode_ordinary(text.substr(pos, stop - pos), threads);
    out.insert(out.end(), part.begin(), part.end());
    if (best == std::string_view::npos) break;
    out.push_back(best_id);
    pos = best + best_len;
  }
  return out;
}

uint32_t Tokenizer::add_special(const std::string& text) {
  ZT_CHECK(!text.empty(), "an empty special token");
  for (const auto& [s, id] : specials_)
    if (s == text) return id;
  const uint32_t id = n_vocab_++;
  specials_.emplace_back(text, id);
  added_.emplace_back(text, id);
  return id;
}

std::string Tokenizer::decode(const std::vector<uint32_t>& tokens) const {
  std::string out;
  for (const uint32_t t : tokens) {
    if (!bpe_ && t < 256) {
      out.push_back(char(t));
      continue;
    }
    if (bpe_ && t < bpe_->n_ranks() && !bpe_->decoder()[t].empty()) {
      out += bpe_->decoder()[t];
      continue;
    }
    auto it = std::find_if(specials_.begin(), specials_.end(), [&](auto& s) { return s.second == t; });
    if (it == specials_.end()) user_error("token id {} is not in the {} vocabulary", t, name_);
    out += it->first;
  }
  return out;
}

}  // namespace zt::data
