// BPE core: the rank table, the split regex, and the merge of one pre-tokenized piece.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace zt::data {

struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class BpeRanks {
 public:
  // `ranks_text`: tiktoken file contents; `pattern`: the split regex; `name` labels errors.
  BpeRanks(const std::string& ranks_text, const std::string& pattern, const std::string& name);
  ~BpeRanks();
  BpeRanks(const BpeRanks&) = delete;
  BpeRanks& operator=(const BpeRanks&) = delete;

  // Appends the pieces of `text` (byte ranges in order) to `pieces`; UserError on bad UTF-8.
  void split(std::string_view text, std::vector<std::pair<size_t, size_t>>& pieces) const;
  // Appends the tokens of one piece to `out` (lowest rank merged first, as tiktoken).
  void encode_piece(std::string_view piece, std::vector<uint32_t>& out) const;

  // Rank of an exact byte string, or UINT32_MAX.
  uint32_t rank(std::string_view bytes) const {
    auto it = encoder_.find(bytes);
    return it == encoder_.end() ? UINT32_MAX : it->second;
  }
  const std::vector<std::string>& decoder() const { return decoder_; }
  uint32_t n_ranks() const { return uint32_t(decoder_.size()); }  // the highest rank + 1
  size_t n_tokens() const { return encoder_.size(); }              // ranks given (holes excluded)

 private:
  std::unordered_map<std::string, uint32_t, StringViewHash, std::equal_to<>> encoder_;
  std::vector<std::string> decoder_;  // rank -> bytes ("" for holes)
  pcre2_code* re_ = nullptr;
  std::string name_;
};

}  // namespace zt::data
