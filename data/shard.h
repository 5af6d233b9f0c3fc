// Token shard files (format in data/FORMAT.md): a 64-byte header, then little-endian tokens.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zt::data {

inline constexpr char kShardMagic[8] = {'Z', 'T', 'O', 'K', 'S', 'H', 'R', 'D'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;

struct ShardHeader {
  uint32_t token_bytes = 2;  // 2 (uint16) or 4 (uint32)
  uint64_t n_tokens = 0;
  uint64_t n_documents = 0;
};

// Writes tokens atomically (temp file + rename). token_bytes 2 requires every id < 65536.
// Returns the file's CRC-32 (zlib polynomial) over all of its bytes.
uint32_t write_shard(const std::string& path, const std::vector<uint32_t>& tokens,
                     uint64_t n_documents, uint32_t token_bytes);

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
