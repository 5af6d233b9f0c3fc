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
  // Creates `dir` if needed. `shard_tokens` is the number of tokens per shard (the last may be
  // shorter).
  ShardWriter(const std::string& dir, const TokenizerInfo& tokenizer, uint64_t shard_tokens);
  void add_document(const std::vector<uint32_t>& tokens);
  // Flushes the last shard and writes the manifest; returns it.
  Manifest finish();

 private:
  void flush();
  std::string dir_;
  Manifest manifest_;
  uint64_t shard_tokens_;
  std::vector<uint32_t> buf_;
  uint64_t buf_docs_ = 0;
};

}  // namespace zt::data
