// Token shard files (format in data/FORMAT.md): a 64-byte header, then little-endian tokens.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zt::data {

inline constexpr char kShardMagic[8] = {'Z', 'T', 'O', 'K', 'S', 'H', 'R', 'D'};
inline constexpr uint32_t kShardVersion = 1;           // a token stream (pre-training)
inline constexpr uint32_t kShardVersionDocuments = 2;  // + document starts and a loss mask (fine-tuning)
inline constexpr size_t kShardHeaderBytes = 64;

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t token_bytes = 2;  // 2 (uint16) or 4 (uint32)
  uint64_t n_tokens = 0;
  uint64_t n_documents = 0;
  // Version 2's sections after the tokens (FORMAT.md): the byte offsets of the document starts
  // (n_documents uint64) and of the loss mask (a bit a token), and the file's size.
  uint64_t documents_offset() const;
  uint64_t loss_mask_offset() const;
  uint64_t file_bytes() const;
};

// The size of a shard file of this version, token width and counts (FORMAT.md).
uint64_t shard_file_bytes(uint32_t version, uint32_t token_bytes, uint64_t n_tokens, uint64_t n_documents);

// Writes tokens atomically (temp file + rename). token_bytes 2 requires every id < 65536.
// Returns the file's CRC-32 (zlib polynomial) over all of its bytes.
uint32_t write_shard(const std::string& path, const std::vector<uint32_t>& tokens,
                     uint64_t n_documents, uint32_t token_bytes);
// A version 2 shard: `doc_starts` the first token of each document (ascending, from 0), `loss`
// one flag a token (1: the token, as a target, carries loss).
uint32_t write_document_shard(const std::string& path, const std::vector<uint32_t>& tokens,
                              const std::vector<uint64_t>& doc_starts, const std::vector<uint8_t>& loss,
                              uint32_t token_bytes);

// Parses and checks a header from `bytes` of a file of `file_size` bytes; UserError names `name`.
ShardHeader parse_shard_header(const void* bytes, size_t file_size, const std::string& name);

// A shard mapped read-only into memory.
class ShardView {
 public:
  explicit ShardView(const std::string& path);
  ~ShardView();
  ShardView(const ShardView&) = delete;
  ShardView& operator=(const ShardView&) = delete;

  const ShardHeader& header() const { return header_; }
  uint32_t token(uint64_t i) const;  // i < n_tokens
  // out[j] = token(first + j) for j < n (first + n <= n_tokens): one pass, vectorizable.
  void read(uint64_t first, uint64_t n, int32_t* out) const;
  // Version 2 only: document i's first token (i < n_documents; checked ascending from 0 when the
  // view opens), and out[j] = 1 when token first + j carries loss, else 0.
  uint64_t document_start(uint64_t i) const;
  void read_loss_mask(uint64_t first, uint64_t n, uint8_t* out) const;
  const std::string& path() const { return path_; }
  const uint8_t* bytes() const { return base_; }
  size_t size() const { return size_; }

 private:
  std::string path_;
  ShardHeader header_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
};

// CRC-32 of a buffer (zlib), continuing from `crc`.
uint32_t crc32_of(const void* data, size_t n, uint32_t crc = 0);

}  // namespace zt::data
