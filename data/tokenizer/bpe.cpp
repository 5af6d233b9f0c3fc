// BPE rank table (tiktoken format), PCRE2 pre-tokenizer, and the lowest-rank-first merge.
#include "data/tokenizer/bpe.h"

#include <algorithm>
#include <array>
#include <functional>

#include "engine/core/status.h"

namespace zt::data {

namespace {

// Standard base64 (RFC 4648) with padding; returns false on any invalid character.
bool base64_decode(std::string_view in, std::string& out) {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[uint8_t(alphabet[i])] = int8_t(i);
    return t;
  }();
  out.clear();
  if (in.size() % 4 != 0) return false;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '=') {
      if (i < in.size() - 2) return false;
      continue;
    }
    const int v = table[uint8_t(c)];
    if (v < 0) return false;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((acc >> bits) & 0xff));
    }
  }
  return true;
}

}  // namespace

BpeRanks::BpeRanks(const std::string& text, const std::string& pattern, const std::string& name)
    : name_(name) {
  size_t line_no = 0, pos = 0;
  std::string bytes;
  std::vector<size_t> rank_line;  // rank -> the line that gave it (0: none yet)
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    uint64_t rank = 0;
    bool ok = sp != std::string_view::npos && sp + 1 < line.size() && sp + 11 >= line.size();
    for (size_t i = sp + 1; ok && i < line.size(); ++i) {
      ok = line[i] >= '0' && line[i] <= '9';
      rank = rank * 10 + uint64_t(line[i] - '0');
    }
    ok = ok && rank < (1u << 31) && base64_decode(line.substr(0, sp), bytes) && !bytes.empty();
    if (!ok) user_error("{}:{}: expected \"<base64 bytes> <rank>\"", name, line_no);
    if (!encoder_.emplace(bytes, uint32_t(rank)).second)
      user_error("{}:{}: duplicate token bytes", name, line_no);
    if (decoder_.size() <= rank) decoder_.resize(rank + 1), rank_line.resize(rank + 1, 0);
    if (rank_line[rank] != 0)
      user_error("{}:{}: rank {} is given twice (first at line {})", name, line_no, rank, rank_line[rank]);
    decoder_[rank] = bytes;
    rank_line[rank] = line_no;
  }
  if (encoder_.empty()) user_error("{}: no ranks in file", name);
  for (int b = 0; b < 256; ++b)
    if (!encoder_.count(std::string(1, char(b))))
      user_error("{}: byte 0x{:02x} has no rank, so some text could not be encoded", name, b);

  int err = 0;
  PCRE2_SIZE err_off = 0;
  re_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                      PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (!re_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    user_error("{}: split regex does not compile at offset {}: {}", name, err_off,
               reinterpret_cast<char*>(msg));
  }
  pcre2_jit_compile(re_, PCRE2_JIT_COMPLETE);  // optional speed-up; falls back to the interpreter
}

BpeRanks::~BpeRanks() { pcre2_code_free(re_); }

void BpeRanks::split(std::string_view text, std::vector<std::pair<size_t, size_t>>& pieces) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re_, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  uint32_t options = 0;  // the first call validates the whole subject as UTF-8
  while (offset < text.size()) {
    const int rc = pcre2_match(re_, subject, text.size(), offset, options, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      const size_t at = pcre2_get_startchar(md);
      pcre2_match_data_free(md);
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21)
        user_error("input is not valid UTF-8 at byte offset {}: {}", at, reinterpret_cast<char*>(msg));
      throw RuntimeFailure(fmt::format("{}: regex match failed: {}", name_, reinterpret_cast<char*>(msg)));
    }
    options = PCRE2_NO_UTF_CHECK;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] == ov[0]) {  // empty match: step one character to make progress
      offset = ov[1] + 1;
      while (offset < text.size() && (uint8_t(text[offset]) & 0xC0) == 0x80) ++offset;
      continue;
    }
    pieces.emplace_back(ov[0], ov[1] - ov[0]);
    offset = ov[1];
  }
  pcre2_match_data_free(md);
}

void BpeRanks::encode_piece(std::string_view piece, std::vector<uint32_t>& out) const {
  if (const uint32_t r = rank(piece); r != UINT32_MAX) {
    out.push_back(r);
    return;
  }
  // tiktoken's merge: repeatedly join the adjacent pair of parts whose joined bytes have the
  // lowest rank (the leftmost on ties) until no pair is a token. Scanning every pair per merge is
  // quadratic in the piece's length (a 100 KB run of letters took 12 s); here the candidate pairs
  // sit in a min-heap ordered by (rank, position), which is that same choice, and a pair whose
  // parts changed since it was pushed is recognized by its version and dropped when popped.
  // Parts are a linked list over byte offsets: part i covers [i, next[i]).
  const uint32_t n = uint32_t(piece.size());
  std::vector<uint32_t> next(n), prev(n), version(n, 0);
  for (uint32_t i = 0; i < n; ++i) next[i] = i + 1, prev[i] = i - 1;  // prev[0] unused
  struct Candidate {
    uint32_t rank, start, version;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : start > o.start; }
  };
  std::vector<Candidate> heap;
  heap.reserve(n);
  // the rank of part i joined with the part after it, or UINT32_MAX
  auto pair_rank = [&](uint32_t i) {
    if (next[i] >= n) return UINT32_MAX;
    return rank(piece.substr(i, next[next[i]] - i));
  };
  auto push = [&](uint32_t i) {
    if (const uint32_t r = pair_rank(i); r != UINT32_MAX) {
      heap.push_back({r, i, version[i]});
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> alive(n, true);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate c = heap.back();
    heap.pop_back();
    if (!alive[c.start] || version[c.start] != c.version) continue;  // its parts have changed
    const uint32_t i = c.start, j = next[i];
    alive[j] = false;
    next[i] = next[j];
    if (next[i] < n) prev[next[i]] = i;
    ++version[i];
    push(i);
    if (i > 0) {
      ++version[prev[i]];
      push(prev[i]);
    }
  }
  for (uint32_t i = 0; i < n; i = next[i]) {
    const uint32_t r = rank(piece.substr(i, next[i] - i));
    ZT_CHECK(r != UINT32_MAX, "BPE produced a part with no rank");
    out.push_back(r);
  }
}

}  // namespace zt::data
