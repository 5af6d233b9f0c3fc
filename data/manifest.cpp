// manifest.json read/write with nlohmann::json; every field is type-checked before use.
#include "data/manifest.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/shard.h"
#include "engine/core/atomic_file.h"
#include "engine/core/status.h"

namespace zt::data {

using nlohmann::json;

uint64_t Manifest::total_tokens() const {
  uint64_t n = 0;
  for (const auto& s : shards) n += s.tokens;
  return n;
}
uint64_t Manifest::total_documents() const {
  uint64_t n = 0;
  for (const auto& s : shards) n += s.documents;
  return n;
}

namespace {
const json& field(const json& obj, const char* key, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key)) user_error("{}: missing field \"{}\"", where, key);
  return obj.at(key);
}
uint64_t get_uint(const json& obj, const char* key, const std::string& where) {
  const json& v = field(obj, key, where);
  if (!v.is_number_unsigned()) user_error("{}: field \"{}\" must be a non-negative integer", where, key);
  return v.get<uint64_t>();
}
std::string get_string(const json& obj, const char* key, const std::string& where) {
  const json& v = field(obj, key, where);
  if (!v.is_string()) user_error("{}: field \"{}\" must be a string", where, key);
  return v.get<std::string>();
}

// A shard's name as the writer makes them (shard_00000.ztok): a stores' key, a URL's last path
// segment and a cache file name at once, so nothing a store or URL would read as more than one
// plain name: no '/', no '%' (an escape such as %2e%2e/ reaches outside the source once a server
// decodes it), no leading dot ("." and ".." and hidden files).
bool plain_file_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name.front() == '.') return false;
  for (const char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-' && c != '+') return false;
  return true;
}
}  // namespace

Manifest parse_manifest(const std::string& text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error ...", or
    // "[json.exception.out_of_range.406] number overflow parsing '1e999'" (found by fuzzing)
    std::string why = e.what();
    if (const size_t at = why.find("at line"); at != std::string::npos) why = why.substr(at);
    else if (const size_t b = why.find("] "); b != std::string::npos) why = ": " + why.substr(b + 2);
    user_error("{}: not valid JSON {}", name, why);
  }
  if (!j.is_object()) user_error("{}: expected a JSON object", name);
  if (get_string(j, "format", name) != "ztrain-shards")
    user_error("{}: field \"format\" must be \"ztrain-shards\"", name);
  Manifest m;
  const uint64_t version = get_uint(j, "version", name);
  if (version != kShardVersion && version != kShardVersionDocuments)
    user_error("{}: manifest version {} is not supported (this build reads {} and {}: a newer ztrain wrote it?)",
               name, version, kShardVersion, kShardVersionDocuments);
  m.version = uint32_t(version);
  const uint64_t tb = get_uint(j, "token_bytes", name);
  if (tb != 2 && tb != 4) user_error("{}: token_bytes must be 2 or 4, got {}", name, tb);
  m.token_bytes = uint32_t(tb);
  const json& tok = field(j, "tokenizer", name);
  const std::string tw = name + ": tokenizer";
  m.tokenizer.kind = get_string(tok, "kind", tw);
  if (m.tokenizer.kind != "byte" && m.tokenizer.kind != "bpe")
    user_error("{}: kind must be \"byte\" or \"bpe\"", tw);
  m.tokenizer.name = get_string(tok, "name", tw);
  const uint64_t nv = get_uint(tok, "n_vocab", tw), eot = get_uint(tok, "eot", tw);
  if (nv == 0 || nv > (1ull << 31)) user_error("{}: n_vocab {} out of range", tw, nv);
  if (eot >= nv) user_error("{}: eot {} is not < n_vocab {}", tw, eot, nv);
  if (tb == 2 && nv > 65536) user_error("{}: n_vocab {} does not fit 2-byte tokens", tw, nv);
  m.tokenizer.n_vocab = uint32_t(nv);
  m.tokenizer.eot = uint32_t(eot);
  if (tok.contains("vocab_file")) m.tokenizer.vocab_file = get_string(tok, "vocab_file", tw);
  if (tok.contains("added_tokens")) {
    const json& added = tok["added_tokens"];
    if (!added.is_object()) user_error("{}: added_tokens must be an object of text -> id", tw);
    for (const auto& [text, id] : added.items()) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() >= nv || text.empty())
        user_error("{}: added_tokens[\"{}\"] must be an id below n_vocab {}", tw, text, nv);
      m.tokenizer.added_tokens.emplace_back(text, uint32_t(id.get<uint64_t>()));
    }
  }
  const json& shards = field(j, "shards", name);
  if (!shards.is_array() || shards.empty()) user_error("{}: \"shards\" must be a non-empty array", name);
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string sw = fmt::format("{}: shards[{}]", name, i);
    ShardEntry e;
    e.file = get_string(shards[i], "file", sw);
    if (!plain_file_name(e.file))
      user_error("{}: file \"{}\" must be a plain name inside the dataset directory (1-255 letters, digits and "
                 ". _ - +, not starting with a dot: no /, no %-escapes)", sw, e.file);
    e.tokens = get_uint(shards[i], "tokens", sw);
    e.documents = get_uint(shards[i], "documents", sw);
    e.bytes = get_uint(shards[i], "bytes", sw);
    const uint64_t crc = get_uint(shards[i], "crc32", sw);
    if (crc > 0xffffffffull) user_error("{}: crc32 does not fit 32 bits", sw);
    e.crc32 = uint32_t(crc);
    if (e.tokens > (UINT64_MAX - 64) / 8 / m.token_bytes || e.documents > UINT64_MAX / 64 ||
        e.bytes != shard_file_bytes(m.version, m.token_bytes, e.tokens, e.documents))
      user_error("{}: bytes = {} is not the size of a version {} shard of {} tokens x {} bytes{}", sw, e.bytes,
                 m.version, e.tokens, m.token_bytes,
                 m.version == kShardVersion ? "" : fmt::format(" and {} documents", e.documents));
    m.shards.push_back(std::move(e));
  }
  return m;
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kManifestName).string();
  std::ifstream f(path, std::ios::binary);
  if (!f) user_error("{}: cannot open dataset manifest (is '{}' a directory made by `ztrain-tokenize shards`?)", path, dir);
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_manifest(ss.str(), path);
}

void write_manifest(const std::string& dir, const Manifest& m) {
  json shards = json::array();
  for (const auto& s : m.shards)
    shards.push_back({{"file", s.file}, {"tokens", s.tokens}, {"documents", s.documents},
                      {"bytes", s.bytes}, {"crc32", s.crc32}});
  json tok = {{"kind", m.tokenizer.kind}, {"name", m.tokenizer.name},
              {"n_vocab", m.tokenizer.n_vocab}, {"eot", m.tokenizer.eot}};
  if (!m.tokenizer.vocab_file.empty()) tok["vocab_file"] = m.tokenizer.vocab_file;
  if (!m.tokenizer.added_tokens.empty()) {
    json added = json::object();
    for (const auto& [text, id] : m.tokenizer.added_tokens) added[text] = id;
    tok["added_tokens"] = added;
  }
  json j = {{"format", "ztrain-shards"}, {"version", m.version}, {"token_bytes", m.token_bytes},
            {"tokenizer", tok},          {"total_tokens", m.total_tokens()},
            {"total_documents", m.total_documents()}, {"shards", shards}};
  const std::string path = (std::filesystem::path(dir) / kManifestName).string();
  write_file_atomic(path, j.dump(1) + "\n", /*durable=*/true);
}

}  // namespace zt::data
