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

uint64_t shard_file_bytes(uint32_t version, uint32_t token_bytes, uint64_t n_tokens, uint64_t n_documents) {
  const uint64_t tokens = kShardHeaderBytes + n_tokens * token_bytes;
  if (version == kShardVersion) return tokens;
  // version 2: the tokens padded to 8 bytes, the document starts, the loss mask's bytes
  return (tokens + 7) / 8 * 8 + n_documents * 8 + (n_tokens + 7) / 8;
}

uint64_t ShardHeader::documents_offset() const {
  return (kShardHeaderBytes + n_tokens * token_bytes + 7) / 8 * 8;
}
uint64_t ShardHeader::loss_mask_offset() const { return documents_offset() + n_documents * 8; }
uint64_t ShardHeader::file_bytes() const { return shard_file_bytes(version, token_bytes, n_tokens, n_documents); }

namespace {
// The header and tokens of a shard file of `total` bytes (the rest zero).
std::vector<uint8_t> shard_buffer(uint32_t version, const std::vector<uint32_t>& tokens, uint64_t n_documents,
                                  uint32_t token_bytes) {
  ZT_CHECK(token_bytes == 2 || token_bytes == 4, "token_bytes {}", token_bytes);
  std::vector<uint8_t> buf(shard_file_bytes(version, token_bytes, tokens.size(), n_documents), 0);
  std::memcpy(buf.data(), kShardMagic, 8);
  put_u32(buf.data() + 8, version);
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
  return buf;
}

uint32_t write_buffer(const std::string& path, const std::vector<uint8_t>& buf) {
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(buf.data()), buf.size()),
                    /*durable=*/true);
  return crc32_of(buf.data(), buf.size());
}
}  // namespace

uint32_t write_shard(const std::string& path, const std::vector<uint32_t>& tokens, uint64_t n_documents,
                     uint32_t token_bytes) {
  return write_buffer(path, shard_buffer(kShardVersion, tokens, n_documents, token_bytes));
}

uint32_t write_document_shard(const std::string& path, const std::vector<uint32_t>& tokens,
                              const std::vector<uint64_t>& doc_starts, const std::vector<uint8_t>& loss,
                              uint32_t token_bytes) {
  ZT_CHECK(loss.size() == tokens.size() && !doc_starts.empty() && doc_starts[0] == 0,
           "a document shard needs a loss flag a token and documents from token 0");
  std::vector<uint8_t> buf = shard_buffer(kShardVersionDocuments, tokens, doc_starts.size(), token_bytes);
  ShardHeader h;
  h.version = kShardVersionDocuments, h.token_bytes = token_bytes, h.n_tokens = tokens.size();
  h.n_documents = doc_starts.size();
  for (size_t i = 0; i < doc_starts.size(); ++i) {
    ZT_CHECK(doc_starts[i] < tokens.size() && (i == 0 || doc_starts[i] > doc_starts[i - 1]),
             "document start {} of {} tokens: not ascending inside the shard", doc_starts[i], tokens.size());
    put_u64(buf.data() + h.documents_offset() + 8 * i, doc_starts[i]);
  }
  uint8_t* mask = buf.data() + h.loss_mask_offset();
  for (size_t i = 0; i < loss.size(); ++i)
    if (loss[i]) mask[i / 8] |= uint8_t(1u << (i % 8));
  return write_buffer(path, buf);
}

ShardHeader parse_shard_header(const void* bytes, size_t file_size, const std::string& name) {
  if (file_size < kShardHeaderBytes)
    user_error("{}: not a token shard: {} bytes, shorter than the {}-byte header", name, file_size,
               kShardHeaderBytes);
  const auto* p = static_cast<const uint8_t*>(bytes);
  if (std::memcmp(p, kShardMagic, 8) != 0)
    user_error("{}: not a token shard: wrong magic at offset 0 (expected ZTOKSHRD)", name);
  ShardHeader h;
  h.version = get_u32(p + 8);
  if (h.version != kShardVersion && h.version != kShardVersionDocuments)
    user_error("{}: shard version {} at offset 8 is not supported (this build reads {} and {}: a newer ztrain "
               "wrote it?)", name, h.version, kShardVersion, kShardVersionDocuments);
  h.token_bytes = get_u32(p + 12);
  h.n_tokens = get_u64(p + 16);
  h.n_documents = get_u64(p + 24);
  if (h.token_bytes != 2 && h.token_bytes != 4)
    user_error("{}: token width {} at offset 12 is not 2 or 4", name, h.token_bytes);
  // Division, not multiplication: huge counts must not overflow into a plausible size.
  const uint64_t body = file_size - kShardHeaderBytes;
  if (h.version == kShardVersion) {
    if (body % h.token_bytes != 0 || body / h.token_bytes != h.n_tokens)
      user_error("{}: header says {} tokens of {} bytes but the file holds {} bytes after the header "
                 "(truncated or corrupt)", name, h.n_tokens, h.token_bytes, body);
    return h;
  }
  if (h.n_tokens > body / h.token_bytes || h.n_documents > body / 8 || h.n_documents == 0 ||
      h.n_documents > h.n_tokens || h.file_bytes() != file_size)
    user_error("{}: header says {} tokens of {} bytes and {} documents, which is not the {} bytes of the file "
               "(truncated or corrupt)", name, h.n_tokens, h.token_bytes, h.n_documents, file_size);
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
    for (uint64_t i = 0; header_.version == kShardVersionDocuments && i < header_.n_documents; ++i) {
      const uint64_t start = document_start(i);
      if ((i == 0 && start != 0) || start >= header_.n_tokens || (i > 0 && start <= document_start(i - 1)))
        user_error("{}: document {} starts at token {}: the starts must ascend from 0 below the {} tokens (corrupt)",
                   path, i, start, header_.n_tokens);
    }
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

uint64_t ShardView::document_start(uint64_t i) const {
  ZT_CHECK(header_.version == kShardVersionDocuments && i < header_.n_documents, "document {} of a version {} shard",
           i, header_.version);
  return get_u64(base_ + header_.documents_offset() + 8 * i);
}

void ShardView::read_loss_mask(uint64_t first, uint64_t n, uint8_t* out) const {
  ZT_CHECK(header_.version == kShardVersionDocuments && first + n <= header_.n_tokens,
           "loss mask of tokens [{}, {}) of a version {} shard of {}", first, first + n, header_.version,
           header_.n_tokens);
  const uint8_t* mask = base_ + header_.loss_mask_offset();
  for (uint64_t j = 0; j < n; ++j) out[j] = (mask[(first + j) / 8] >> ((first + j) % 8)) & 1u;
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
