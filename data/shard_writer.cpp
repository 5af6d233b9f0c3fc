// ShardWriter: accumulate tokens, cut shards, record sizes and CRCs in the manifest.
#include "data/shard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "data/shard.h"
#include "engine/core/atomic_file.h"
#include "engine/core/status.h"

namespace zt::data {

namespace fs = std::filesystem;

namespace {
// A file a dataset directory holds: the manifest, shards, and their .tmp while being written.
bool dataset_file(const std::string& name) {
  const auto ends = [&](const char* s) { return name.size() >= std::strlen(s) && name.rfind(s) == name.size() - std::strlen(s); };
  return name == kManifestName || name == std::string(kManifestName) + ".tmp" ||
         (name.rfind("shard_", 0) == 0 && (ends(".ztok") || ends(".ztok.tmp")));
}
}  // namespace

ShardWriter::ShardWriter(const std::string& dir, const TokenizerInfo& tokenizer, uint64_t shard_tokens,
                         uint32_t version)
    : dir_(dir), shard_tokens_(shard_tokens) {
  ZT_CHECK(version == kShardVersion || version == kShardVersionDocuments, "shard version {}", version);
  manifest_.version = version;
  ZT_CHECK(shard_tokens > 0, "shard_tokens must be > 0");
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  if (fs::exists(dir_) && !fs::is_directory(dir_)) user_error("--out {}: is a file, not a directory", dir_);
  if (fs::is_directory(dir_))
    for (const auto& e : fs::directory_iterator(dir_))
      if (!dataset_file(e.path().filename().string()))
        user_error("--out {}: holds {}, which is not part of a dataset; the new dataset replaces the "
                   "directory, so give a new directory or one that holds a dataset only", dir_,
                   e.path().filename().string());
  building_ = fmt::format("{}.building-{}", dir_, ::getpid());
  fs::remove_all(building_);
  fs::create_directories(building_);
  manifest_.tokenizer = tokenizer;
  manifest_.token_bytes = tokenizer.n_vocab <= 65536 ? 2 : 4;
}

void ShardWriter::add_document(const std::vector<uint32_t>& tokens) {
  ZT_CHECK(manifest_.version == kShardVersion, "a version 2 dataset's documents come with their loss mask");
  buf_.push_back(manifest_.tokenizer.eot);
  buf_docs_++;
  for (const uint32_t t : tokens) {
    if (buf_.size() == shard_tokens_) flush();
    buf_.push_back(t);
  }
  if (buf_.size() == shard_tokens_) flush();
}

void ShardWriter::add_document(const std::vector<uint32_t>& tokens, const std::vector<uint8_t>& loss) {
  ZT_CHECK(manifest_.version == kShardVersionDocuments && loss.size() == tokens.size(),
           "a loss mask goes with a version 2 dataset, one flag a token");
  if (tokens.empty()) return;
  if (!buf_.empty() && buf_.size() + tokens.size() > shard_tokens_) flush();
  doc_starts_.push_back(buf_.size());
  buf_.insert(buf_.end(), tokens.begin(), tokens.end());
  loss_.insert(loss_.end(), loss.begin(), loss.end());
  buf_docs_++;
}

void ShardWriter::flush() {
  if (buf_.empty()) return;
  ShardEntry e;
  e.file = fmt::format("shard_{:05d}.ztok", manifest_.shards.size());
  e.tokens = buf_.size();
  e.documents = buf_docs_;
  e.bytes = shard_file_bytes(manifest_.version, manifest_.token_bytes, e.tokens, e.documents);
  const std::string path = (fs::path(building_) / e.file).string();
  e.crc32 = manifest_.version == kShardVersion
                ? write_shard(path, buf_, buf_docs_, manifest_.token_bytes)
                : write_document_shard(path, buf_, doc_starts_, loss_, manifest_.token_bytes);
  manifest_.shards.push_back(e);
  buf_.clear();
  doc_starts_.clear();
  loss_.clear();
  buf_docs_ = 0;
}

ShardWriter::~ShardWriter() {
  if (finished_) return;
  std::error_code ec;
  fs::remove_all(building_, ec);
}

Manifest ShardWriter::finish() {
  flush();
  if (manifest_.shards.empty()) user_error("no documents were given, so no shard was written");
  write_manifest(building_, manifest_);
  replace_dir_atomic(building_, dir_);
  finished_ = true;
  return manifest_;
}

}  // namespace zt::data
