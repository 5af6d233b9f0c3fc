// The shard manifest (manifest.json, format in data/FORMAT.md): which shards make a dataset, how
// many tokens and documents each holds, its CRC-32, and the tokenizer that produced them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zt::data {

struct TokenizerInfo {
  std::string kind;        // "byte" or "bpe"
  std::string name;        // "byte", "gpt2", "cl100k_base", ...
  uint32_t n_vocab = 0;    // every token id is < n_vocab
  uint32_t eot = 0;        // end-of-text id that separates documents
  std::string vocab_file;  // for "bpe": the .tiktoken file used (informational, for decoding)
  // Special tokens added after the vocabulary (a chat template's markup, `ztrain-tokenize chat`): text -> id.
  std::vector<std::pair<std::string, uint32_t>> added_tokens;
};

struct ShardEntry {
  std::string file;  // relative to the manifest's directory
  uint64_t tokens = 0, documents = 0, bytes = 0;
  uint32_t crc32 = 0;  // over the whole file
};

struct Manifest {
  // 1: a token stream; 2: fine-tuning shards with document starts and a loss mask (FORMAT.md)
  uint32_t version = 1;
  uint32_t token_bytes = 2;
  TokenizerInfo tokenizer;
  std::vector<ShardEntry> shards;
  uint64_t total_tokens() const;
  uint64_t total_documents() const;
};

inline constexpr const char* kManifestName = "manifest.json";

// Reads DIR/manifest.json; any malformation is a UserError naming the file and field.
Manifest read_manifest(const std::string& dir);
// Writes DIR/manifest.json atomically.
void write_manifest(const std::string& dir, const Manifest& m);
// Parses manifest text (fuzzing and tests); `name` labels errors.
Manifest parse_manifest(const std::string& text, const std::string& name);

}  // namespace zt::data
