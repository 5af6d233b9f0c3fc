// Builds a dataset directory: documents go in, fixed-size shards and manifest.json come out.
// Version 1: each document is preceded by the end-of-text token and may continue into the next
// shard. Version 2 (fine-tuning): documents whole, with their starts and a loss mask.
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
  // `version` 2 (kShardVersionDocuments): fine-tuning shards, documents whole with a loss mask.
  ShardWriter(const std::string& dir, const TokenizerInfo& tokenizer, uint64_t shard_tokens, uint32_t version = 1);
  ~ShardWriter();  // removes the unfinished build
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  // Version 1: the document after an end-of-text token, continuing into the next shard as needed.
  void add_document(const std::vector<uint32_t>& tokens);
  // Version 2: the document as given (no separator), whole in one shard (a new shard when it does
  // not fit; one longer than shard_tokens alone in its own), loss[i] = 1 when token i trains.
  void add_document(const std::vector<uint32_t>& tokens, const std::vector<uint8_t>& loss);
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
  std::vector<uint64_t> doc_starts_;  // version 2: of the documents in buf_
  std::vector<uint8_t> loss_;         // version 2: a flag a token of buf_
};

}  // namespace zt::data
