// Shards, manifests and the sample order: malformed input is a UserError naming the file and
// never an out-of-bounds read; the order depends only on (seed, epoch, dataset).
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "data/loader.h"
#include "data/manifest.h"
#include "data/shard.h"
#include "data/shard_writer.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"

using namespace zt;
using namespace zt::data;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("ztrain_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// A byte-level dataset of `docs` documents with known contents.
Manifest make_dataset(const fs::path& dir, int docs, int doc_len, uint64_t shard_tokens) {
  ShardWriter w(dir.string(), TokenizerInfo{"byte", "byte", 257, 256, "", {}}, shard_tokens);
  for (int d = 0; d < docs; ++d) {
    std::vector<uint32_t> t(doc_len);
    for (int i = 0; i < doc_len; ++i) t[i] = uint32_t((d * 31 + i) % 256);
    w.add_document(t);
  }
  return w.finish();
}

std::string user_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("shards round-trip through the writer, manifest and reader", "[data]") {
  const fs::path dir = temp_dir("roundtrip");
  const Manifest m = make_dataset(dir, 10, 100, 333);
  REQUIRE(m.shards.size() == 4);  // 10 * (100 + 1 eot) = 1010 tokens in shards of 333
  REQUIRE(m.total_tokens() == 1010);
  REQUIRE(m.total_documents() == 10);
  const Manifest r = read_manifest(dir.string());
  REQUIRE(r.shards.size() == 4);
  REQUIRE(r.shards[3].tokens == 11);
  ShardView v((dir / r.shards[0].file).string());
  REQUIRE(v.header().n_tokens == 333);
  REQUIRE(v.token(0) == 256);  // each document starts with end-of-text
  REQUIRE(v.token(1) == 0);
  REQUIRE(v.token(102) == 31);  // second document's first token
}

TEST_CASE("malformed shard headers are named, never read out of bounds", "[data][errors]") {
  std::vector<uint8_t> good(64 + 2 * 10, 0);
  std::memcpy(good.data(), "ZTOKSHRD", 8);
  uint32_t v = 1, tb = 2;
  uint64_t n = 10;
  std::memcpy(good.data() + 8, &v, 4);
  std::memcpy(good.data() + 12, &tb, 4);
  std::memcpy(good.data() + 16, &n, 8);
  REQUIRE(parse_shard_header(good.data(), good.size(), "s").n_tokens == 10);
  CHECK_THAT(user_error_of([&] { parse_shard_header(good.data(), 10, "s.ztok"); }), Catch::Contains("s.ztok: not a token shard: 10 bytes"));
  auto bad = good;
  bad[0] = 'X';
  CHECK_THAT(user_error_of([&] { parse_shard_header(bad.data(), bad.size(), "s"); }), Catch::Contains("wrong magic"));
  CHECK_THAT(user_error_of([&] { parse_shard_header(good.data(), good.size() - 1, "s"); }), Catch::Contains("truncated or corrupt"));
  bad = good;
  uint64_t huge = ~0ull / 2;
  std::memcpy(bad.data() + 16, &huge, 8);
  CHECK_THAT(user_error_of([&] { parse_shard_header(bad.data(), bad.size(), "s"); }), Catch::Contains("truncated or corrupt"));
  bad = good;
  bad[12] = 3;
  CHECK_THAT(user_error_of([&] { parse_shard_header(bad.data(), bad.size(), "s"); }), Catch::Contains("token width 3"));
  bad = good;
  bad[8] = 9;
  CHECK_THAT(user_error_of([&] { parse_shard_header(bad.data(), bad.size(), "s"); }), Catch::Contains("version 9"));
}

TEST_CASE("fine-tuning shards (version 2) keep whole documents, their starts and loss masks", "[data]") {
  const fs::path dir = temp_dir("v2");
  TokenizerInfo tok{"byte", "byte", 259, 256, "", {{"<|a|>", 257}, {"<|b|>", 258}}};
  ShardWriter w(dir.string(), tok, 100, kShardVersionDocuments);
  std::vector<std::vector<uint32_t>> docs;
  for (int d = 0; d < 7; ++d) {
    std::vector<uint32_t> t(size_t(20 + 13 * d));  // 20 .. 98 tokens: never split, some shards of one
    std::vector<uint8_t> loss(t.size());
    for (size_t i = 0; i < t.size(); ++i) t[i] = uint32_t((d * 7 + i) % 259), loss[i] = (i + d) % 3 == 0;
    w.add_document(t, loss);
    docs.push_back(t);
  }
  const Manifest m = w.finish();
  const Manifest r = read_manifest(dir.string());
  REQUIRE(r.version == 2);
  REQUIRE(r.tokenizer.added_tokens == tok.added_tokens);
  REQUIRE(r.total_documents() == 7);
  size_t d = 0;
  for (const ShardEntry& e : r.shards) {
    ShardView v((dir / e.file).string());
    REQUIRE(v.header().version == 2);
    REQUIRE(v.size() == e.bytes);
    REQUIRE((v.header().n_tokens <= 100 || v.header().n_documents == 1));
    for (uint64_t k = 0; k < v.header().n_documents; ++k, ++d) {
      const uint64_t a = v.document_start(k), b = k + 1 < v.header().n_documents ? v.document_start(k + 1) : e.tokens;
      REQUIRE(b - a == docs[d].size());
      std::vector<int32_t> got(b - a);
      std::vector<uint8_t> loss(b - a);
      v.read(a, b - a, got.data());
      v.read_loss_mask(a, b - a, loss.data());
      for (size_t i = 0; i < got.size(); ++i) {
        REQUIRE(uint32_t(got[i]) == docs[d][i]);
        REQUIRE(loss[i] == ((i + d) % 3 == 0 ? 1 : 0));
      }
    }
  }
  REQUIRE(d == 7);
  // corrupt document starts are refused when the shard opens; a truncated file by its size
  const std::string first = (dir / r.shards[0].file).string();
  std::string bytes;
  {
    std::ifstream f(first, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  const ShardView ok(first);
  REQUIRE(ok.header().n_documents == 3);  // 20 + 33 + 46 tokens
  const uint64_t starts = ok.header().documents_offset();
  // (document, start): the first not at 0, the second not after the first, the second past the end
  for (const auto& [doc, bad_start] : {std::pair<int, uint64_t>{0, 3}, {1, 0}, {1, ok.header().n_tokens}}) {
    std::string bad = bytes;
    std::memcpy(&bad[starts + 8 * doc], &bad_start, 8);
    const std::string path = (dir / "bad.ztok").string();
    std::ofstream(path, std::ios::binary) << bad;
    CHECK_THAT(user_error_of([&] { ShardView v(path); }), Catch::Contains("starts at token"));
  }
  CHECK_THAT(user_error_of([&] { parse_shard_header(bytes.data(), bytes.size() - 1, "s"); }),
             Catch::Contains("truncated or corrupt"));
  // the manifest's sizes are version 2's
  std::string text;
  {
    std::ifstream f(dir / "manifest.json");
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  const std::string v1 = std::regex_replace(text, std::regex("\"version\": 2"), "\"version\": 1");
  CHECK_THAT(user_error_of([&] { parse_manifest(v1, "m"); }), Catch::Contains("is not the size of a version 1 shard"));
  const std::string v3 = std::regex_replace(text, std::regex("\"version\": 2"), "\"version\": 3");
  CHECK_THAT(user_error_of([&] { parse_manifest(v3, "m"); }), Catch::Contains("manifest version 3 is not supported"));
  (void)m;
}

TEST_CASE("malformed manifests are named with the field", "[data][errors]") {
  const std::string good = R"({"format":"ztrain-shards","version":1,"token_bytes":2,
    "tokenizer":{"kind":"byte","name":"byte","n_vocab":257,"eot":256},
    "shards":[{"file":"a.ztok","tokens":10,"documents":1,"bytes":84,"crc32":5}]})";
  REQUIRE(parse_manifest(good, "m").shards.size() == 1);
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return user_error_of([&] { parse_manifest(s, "m.json"); });
  };
  CHECK_THAT(edit("\"bytes\":84", "\"bytes\":85"), Catch::Contains("bytes = 85 is not the size of a version 1 shard"));
  CHECK_THAT(edit("\"a.ztok\"", "\"../etc/passwd\""), Catch::Contains("must be a plain name"));
  // hardening round 4, item 8: escapes a server decodes, and names under a subdirectory
  for (const char* bad : {"%2e%2e/%2e%2e/secret.ztok", "%2e%2e%2fsecret.ztok", "sub/shard.ztok", ".hidden.ztok", "..",
                          "a\\\\b.ztok", "a b.ztok", "a?x=1.ztok", "a#b.ztok"}) {
    CAPTURE(bad);
    CHECK_THAT(edit("\"a.ztok\"", std::string("\"") + bad + "\""), Catch::Contains("must be a plain name"));
  }
  CHECK(user_error_of([&] {
          std::string s = good;
          s.replace(s.find("a.ztok"), 6, "shard_00001+v2.ztok");
          parse_manifest(s, "m.json");
        }) == "(no error)");
  CHECK_THAT(edit("\"eot\":256", "\"eot\":257"), Catch::Contains("eot 257 is not < n_vocab 257"));
  CHECK_THAT(edit("\"tokens\":10", "\"tokens\":-1"), Catch::Contains("\"tokens\" must be a non-negative integer"));
  CHECK_THAT(edit("\"token_bytes\":2", "\"token_bytes\":3"), Catch::Contains("token_bytes must be 2 or 4"));
  CHECK_THAT(edit("\"shards\":[", "\"shards\":7,\"x\":["), Catch::Contains("\"shards\" must be a non-empty array"));
  CHECK_THAT(user_error_of([] { parse_manifest("{not json", "m.json"); }), Catch::Contains("m.json: not valid JSON"));
  CHECK_THAT(user_error_of([] { parse_manifest("[]", "m.json"); }), Catch::Contains("expected a JSON object"));
}

TEST_CASE("the sample order is a permutation per epoch, fixed by the seed", "[data]") {
  const fs::path dir = temp_dir("order");
  make_dataset(dir, 20, 50, 400);
  TokenDataset ds(dir.string(), 16, 257);
  const uint64_t n = ds.n_windows();
  REQUIRE(n > 40);
  SampleOrder a(ds, 7, true), b(ds, 7, true), c(ds, 8, true);
  std::set<uint64_t> epoch0, epoch1;
  bool differs_from_other_seed = false, epochs_differ = false;
  for (uint64_t g = 0; g < n; ++g) {
    epoch0.insert(a.window_for(g));
    epoch1.insert(a.window_for(n + g));
    differs_from_other_seed |= a.window_for(g) != c.window_for(g);
    epochs_differ |= a.window_for(g) != a.window_for(n + g);
  }
  REQUIRE(epoch0.size() == n);  // every window exactly once per epoch
  REQUIRE(epoch1.size() == n);
  REQUIRE(differs_from_other_seed);
  REQUIRE(epochs_differ);
  for (uint64_t g = 0; g < 3 * n; g += 7) REQUIRE(a.window_for(g) == b.window_for(g));
  // batches are contiguous runs of the global order: a (4, T) batch == four (1, T) batches
  std::vector<int32_t> in4(4 * 16), tg4(4 * 16), in1(16), tg1(16);
  a.fill(ds, 12, 4, in4.data(), tg4.data());
  for (int i = 0; i < 4; ++i) {
    b.fill(ds, 12 + i, 1, in1.data(), tg1.data());
    REQUIRE(std::equal(in1.begin(), in1.end(), in4.begin() + i * 16));
    REQUIRE(std::equal(tg1.begin(), tg1.end(), tg4.begin() + i * 16));
    REQUIRE(std::equal(in1.begin() + 1, in1.end(), tg1.begin()));  // targets are inputs shifted by one
  }
}

TEST_CASE("tokens outside the model's vocabulary are rejected with their position", "[data][errors]") {
  const fs::path dir = temp_dir("vocab");
  make_dataset(dir, 2, 40, 1000);
  CHECK_THAT(user_error_of([&] { TokenDataset(dir.string(), 8, 200); }), Catch::Contains("has 257 tokens but [model] vocab_size is 200"));
  CHECK_THAT(user_error_of([&] { TokenDataset(dir.string(), 500, 257); }), Catch::Contains("no shard holds more than seq_len = 500"));
}

TEST_CASE("the counter-based generator depends only on (seed, stream, index)", "[core][rng]") {
  REQUIRE(normal_at(1, 2, 3) == normal_at(1, 2, 3));
  REQUIRE(normal_at(1, 2, 3) != normal_at(1, 2, 4));
  REQUIRE(normal_at(1, 2, 3) != normal_at(2, 2, 3));
  REQUIRE(normal_at(1, 2, 3) != normal_at(1, 3, 3));
  // Philox4x32-10 known-answer test (Random123 kat_vectors: ctr = key = 0)
  const Philox4 z = philox4x32(0, 0, 0);
  REQUIRE(z.v[0] == 0x6627e8d5u);
  REQUIRE(z.v[1] == 0xe169c58du);
  REQUIRE(z.v[2] == 0xbc57ac4cu);
  REQUIRE(z.v[3] == 0x9b00dbd8u);
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = normal_at(42, name_hash("w"), uint64_t(i));
    sum += x;
    sq += x * x;
  }
  REQUIRE(std::abs(sum / n) < 0.01);
  REQUIRE(std::abs(sq / n - 1.0) < 0.01);
}

TEST_CASE("the global sample order is the same for D = 1, 2, 4 and across a restored position", "[data][order]") {
  const fs::path dir = temp_dir("dporder");
  make_dataset(dir, 30, 60, 300);
  TokenDataset ds(dir.string(), 8, 257);
  const int64_t GB = 8;
  const int B = 2;
  // Reference: D = 1, steps 0..5, one loader from the start.
  auto batches = [&](int dp, int rank, uint64_t start_step, int steps) {
    MixedData mixed{{"d"}, {&ds}, {SampleOrder(ds, 99, true, 2)}, MixSchedule(std::vector<MixSchedule::Stage>{{0, {kWeightOne}}})};
    const uint64_t accum = uint64_t(GB / dp / B);
    BatchLoader loader(mixed, mixed.schedule.start(), B,
                       [&](uint64_t k) { return micro_batch_first_sample(k, GB, dp, rank, B); }, start_step * accum, 2,
                       1);
    std::vector<std::vector<int32_t>> out;  // per step, this rank's inputs
    for (int s = 0; s < steps; ++s) {
      std::vector<int32_t> step_in;
      for (uint64_t m = 0; m < accum; ++m) {
        std::vector<int32_t> in(size_t(B) * 8), tg(in.size());
        loader.next(in.data(), tg.data(), nullptr);
        step_in.insert(step_in.end(), in.begin(), in.end());
      }
      out.push_back(step_in);
    }
    return out;
  };
  const auto ref = batches(1, 0, 0, 6);
  for (int dp : {2, 4}) {
    // restored at step 3 with another data-parallel degree: ranks' slices, concatenated in rank
    // order, are the reference's steps 3, 4, 5
    std::vector<std::vector<std::vector<int32_t>>> per_rank;
    for (int r = 0; r < dp; ++r) per_rank.push_back(batches(dp, r, 3, 3));
    for (int s = 0; s < 3; ++s) {
      std::vector<int32_t> joined;
      for (int r = 0; r < dp; ++r) joined.insert(joined.end(), per_rank[r][s].begin(), per_rank[r][s].end());
      CAPTURE(dp, s);
      REQUIRE(joined == ref[3 + s]);
    }
  }
}
