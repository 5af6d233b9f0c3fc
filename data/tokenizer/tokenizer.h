// Tokenizers: byte-level (256 byte tokens + end-of-text, no vocabulary) and tiktoken-format BPE
// (GPT-2, cl100k_base, ...). Encoding is byte-exact with OpenAI's tiktoken: the same split regex
// (run by PCRE2 with Unicode properties) and the same lowest-rank-first merge rule.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zt::data {

class BpeRanks;

class Tokenizer {
 public:
  // Byte-level: token i < 256 is byte i, token 256 is <|endoftext|>.
  static Tokenizer byte_level();
  // Loads FILE (tiktoken ranks: "base64(bytes) rank" per line) and its split regex and special
  // tokens from FILE with ".tiktoken" replaced by ".meta.json". UserError on malformed input.
  static Tokenizer from_tiktoken(const std::string& path);
  // "byte" or a .tiktoken path.
  static Tokenizer load(const std::string& vocab);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Encodes text with special-token strings treated as ordinary text (tiktoken encode_ordinary).
  // `threads` > 1 splits the BPE work over cores; the result does not depend on it.
  // UserError when `text` is not valid UTF-8 (BPE mode), naming the byte offset.
  std::vector<uint32_t> encode_ordinary(std::string_view text, int threads = 1) const;
  // Encodes text in which special-token strings (e.g. <|endoftext|>) become their ids.
  std::vector<uint32_t> encode_with_special(std::string_view text, int threads = 1) const;
  // Concatenated bytes of the tokens; UserError on an id outside the vocabulary.
  std::string decode(const std::vector<uint32_t>& tokens) const;

  // The id of special token `text`: the vocabulary's own, or a new id after the vocabulary
  // (n_vocab grows by one), as fine-tuning adds a chat template's markup tokens.
  uint32_t add_special(const std::string& text);
  // The special tokens past the ranks' and the base vocabulary's (added by add_special), text -> id.
  const std::vector<std::pair<std::string, uint32_t>>& added_specials() const { return added_; }

  const std::string& kind() const { return kind_; }  // "byte" | "bpe"
  const std::string& name() const { return name_; }
  uint32_t n_vocab() const { return n_vocab_; }
  uint32_t eot() const { return eot_; }
  const std::string& vocab_file() const { return vocab_file_; }

 private:
  Tokenizer();
  std::string kind_, name_, vocab_file_;
  uint32_t n_vocab_ = 0, eot_ = 0;
  std::unique_ptr<BpeRanks> bpe_;  // null for byte-level
  std::vector<std::pair<std::string, uint32_t>> specials_;  // text -> id, e.g. <|endoftext|>
  std::vector<std::pair<std::string, uint32_t>> added_;     // of them, those add_special made
};

}  // namespace zt::data
