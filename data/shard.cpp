// Shard writing (atomic) and reading (mmap, header validated before any token is touched).
#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "engine/core/atomic_file.h"
#include "engine/core/status.h"

namespace zt::data {

uint32_t crc32_of(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt chunk = uInt(std::min<size_t>(n, 1u << 30));
    crc = uint32_t(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

namespace {
void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }  // little-endian hosts only
void put_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t get_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
uint64_t get_u64(const uint8_t* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }
}  // namespace

uint32_t write_shard(const std::string& path, const std::vector<uint32_t>& tokens,
                     uint64_t n_documents, uint32_t token_bytes) {
  ZT_CHECK(token_bytes == 2 || token_bytes == 4, "token_bytes {}", token_bytes);
  std::vector<uint8_t> buf(kShardHeaderBytes + tokens.size() * token_bytes, 0);
  std::memcpy(buf.data(), kShardMagic, 8);
  put_u32(buf.data() + 8, kShardVersion);
  put_u32(buf.data() + 12, token_bytes);
  put_u64(buf.data() + 16, tokens.size());
  put_u64(buf.data() + 24, n_documents);
  uint8_t* body = buf.data() + kShardHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (token_bytes == 2) {
      ZT_CHECK(tokens[i] < 65536, "token {} does not fit a uint16 shard", tokens[i]);
      const uint16_t t = uint16_t(tokens[i]);
      std::memcpy(body + 2 * i, &t, 2);
    } else {
      put_u32(body + 4 * i, tokens[i]);
    }
  }
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(buf.data()), buf.size()),
                    /*durable=*/true);
  return crc32_of(buf.data(), buf.size());
}

ShardHeader parse_shard_header(const void* bytes, size_t file_size, const std::string& name) {
  if (file_size < kShardHeaderBytes)
    user_error("{}: not a token shard: {} bytes, shorter than the {}-byte header", name, file_size,
               kShardHeaderBytes);
  const auto* p = static_cast<const uint8_t*>(bytes);
  if (std::memcmp(p, kShardMagic, 8) != 0)
    user_error("{}: not a token shard: wrong magic at offset 0 (expected ZTOKSHRD)", name);
  const uint32_t version = get_u32(p + 8);
  if (version != kShardVersion)
    user_error("{}: shard version {} at offset 8 is not supported (expected {})", name, version,
               kShardVersion);
  ShardHeader h;
  h.token_bytes = get_u32(p + 12);
  h.n_tokens = get_u64(p + 16);
  h.n_documents = get_u64(p + 24);
  if (h.token_bytes != 2 && h.token_bytes != 4)
    user_error("{}: token width {} at offset 12 is not 2 or 4", name, h.token_bytes);
  // Division, not multiplication: a huge n_tokens must not overflow into a plausible size.
  const uint64_t body = file_size - kShardHeaderBytes;
  if (body % h.token_bytes != 0 || body / h.token_bytes != h.n_tokens)
    user_error("{}: header says {} tokens of {} bytes but the file holds {} bytes after the header "
               "(truncated or corrupt)", name, h.n_tokens, h.token_bytes, body);
  return h;
}

ShardView::ShardView(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) user_error("{}: cannot open shard: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw RuntimeFailure(fmt::format("{}: fstat: {}", path, std::strerror(errno)));
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) throw RuntimeFailure(fmt::format("{}: mmap: {}", path, std::strerror(errno)));
    base_ = static_cast<const uint8_t*>(m);
  } else {
    ::close(fd);
  }
  try {
    header_ = parse_shard_header(base_, size_, path);
  } catch (...) {
    if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
    throw;
  }
}

ShardView::~ShardView() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

void ShardView::read(uint64_t first, uint64_t n, int32_t* out) const {
  ZT_CHECK(first + n <= header_.n_tokens, "read of tokens [{}, {}) past {}", first, first + n, header_.n_tokens);
  const uint8_t* p = base_ + kShardHeaderBytes + first * header_.token_bytes;
  if (header_.token_bytes == 2) {
    for (uint64_t j = 0; j < n; ++j) {
      uint16_t t;
      std::memcpy(&t, p + 2 * j, 2);
      out[j] = int32_t(t);
    }
  } else {
    std::memcpy(out, p, n * 4);
  }
}

uint32_t ShardView::token(uint64_t i) const {
  const uint8_t* p = base_ + kShardHeaderBytes + i * header_.token_bytes;
  if (header_.token_bytes == 2) {
    uint16_t t;
    std::memcpy(&t, p, 2);
    return t;
  }
  return get_u32(p);
}

}  // namespace zt::data
