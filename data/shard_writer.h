// Builds a dataset directory: documents go in, fixed-size shards and manifest.json come out.
// Each document is preceded by the end-of-text token; a document may continue into the next shard.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/manifest.h"

namespace zt::data {

class ShardWriter {
 public:
  // The dataset is built beside `dir` (DIR.building-PID) and swapped in by finish(), so a failure
  // (a full disk, bad input) leaves a previous dataset in `dir` whole and usable, never its
  // manifest with new shards. `dir` may be new or hold a dataset only: UserError when it is a
  // file or holds other files (they would be replaced). `shard_tokens`: tokens per shard (the
  // last may be shorter).
  ShardWriter(const std::string& dir, const TokenizerInfo& tokenizer, uint64_t shard_tokens);
  ~ShardWriter();  // removes the unfinished build
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  void add_document(const std::vector<uint32_t>& tokens);
  // Flushes the last shard, writes the manifest and replaces `dir` with the new dataset in one
  // rename (the previous one is then deleted); returns the manifest.
  Manifest finish();

 private:
  void flush();
  std::string dir_, building_;
  bool finished_ = false;
  Manifest manifest_;
  uint64_t shard_tokens_;
  std::vector<uint32_t> buf_;
  uint64_t buf_docs_ = 0;
};

}  // namespace zt::data
