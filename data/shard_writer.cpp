// ShardWriter: accumulate tokens, cut shards, record sizes and CRCs in the manifest.
#include "data/shard_writer.h"

#include <filesystem>

#include "data/shard.h"
#include "engine/core/status.h"

namespace zt::data {

ShardWriter::ShardWriter(const std::string& dir, const TokenizerInfo& tokenizer,
                         uint64_t shard_tokens)
    : dir_(dir), shard_tokens_(shard_tokens) {
  ZT_CHECK(shard_tokens > 0, "shard_tokens must be > 0");
  std::filesystem::create_directories(dir);
  manifest_.tokenizer = tokenizer;
  manifest_.token_bytes = tokenizer.n_vocab <= 65536 ? 2 : 4;
}

void ShardWriter::add_document(const std::vector<uint32_t>& tokens) {
  buf_.push_back(manifest_.tokenizer.eot);
  buf_docs_++;
  for (const uint32_t t : tokens) {
    if (buf_.size() == shard_tokens_) flush();
    buf_.push_back(t);
  }
  if (buf_.size() == shard_tokens_) flush();
}

void ShardWriter::flush() {
  if (buf_.empty()) return;
  ShardEntry e;
  e.file = fmt::format("shard_{:05d}.ztok", manifest_.shards.size());
  e.tokens = buf_.size();
  e.documents = buf_docs_;
  e.bytes = kShardHeaderBytes + buf_.size() * manifest_.token_bytes;
  e.crc32 = write_shard((std::filesystem::path(dir_) / e.file).string(), buf_, buf_docs_,
                        manifest_.token_bytes);
  manifest_.shards.push_back(e);
  buf_.clear();
  buf_docs_ = 0;
}

Manifest ShardWriter::finish() {
  flush();
  if (manifest_.shards.empty()) user_error("no documents were given, so no shard was written");
  write_manifest(dir_, manifest_);
  return manifest_;
}

}  // namespace zt::data
