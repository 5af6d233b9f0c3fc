// [[data.sources]] and [[data.stages]]: a mixture resolves (names, weights, stages in the train
// sources' order) and survives the resolved dump; each kind of bad mixture is one UserError
// naming the key and its line.
#include <catch2/catch.hpp>

#include <filesystem>
#include <utility>

#include "engine/hf/spec_loading.h"
#include "engine/core/status.h"

using namespace zt;

namespace {

const std::string kHead = R"([model]
n_layer = 2
n_head = 2
d_model = 16
vocab_size = 300
seq_len = 32
[train]
max_steps = 100
)";

const std::string kSources = R"(
[[data.sources]]
uri = "data/web/train"
weight = 0.5
[[data.sources]]
uri = "s3://bucket/code/train"
weight = 0.3
[[data.sources]]
name = "books"
uri = "https://host/books"
weight = 0.2
[[data.sources]]
uri = "data/web/val"
split = "val"
)";

RunSpec parse(const std::string& extra) { return parse_run_spec(kHead + extra, "spec.toml"); }

std::string error_of(const std::string& extra) {
  try {
    parse(extra);
  } catch (const UserError& e) {
    return e.what();
  }
  FAIL("expected a UserError");
  return "";
}

}  // namespace

TEST_CASE("a mixture resolves names, weights and stages", "[config][mixture]") {
  const RunSpec s = parse(kSources + R"(
[[data.stages]]
step = 80
weights = { books = 1, "web/train" = 0, "code/train" = 0.5 }
)");
  const auto train = s.data.of_split("train");
  REQUIRE(train.size() == 3);
  CHECK(train[0].name == "web/train");  // "train" twice: the last two components
  CHECK(train[1].name == "code/train");
  CHECK(train[2].name == "books");
  CHECK(train[1].weight == 0.3);
  CHECK(s.data.of_split("val").at(0).name == "val");
  REQUIRE(s.data.stages.size() == 1);
  CHECK(s.data.stages[0].weights == std::vector<double>{0, 0.5, 1});
  CHECK(train[0].at == "spec.toml:10");
  // the resolved dump parses back to the same mixture
  const RunSpec r = parse_run_spec(resolved_toml(s), "resolved.toml");
  REQUIRE(r.data.sources.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(r.data.sources[i].name == s.data.sources[i].name);
    CHECK(r.data.sources[i].uri == s.data.sources[i].uri);
    CHECK(r.data.sources[i].weight == s.data.sources[i].weight);
  }
  CHECK(r.data.stages[0].weights == s.data.stages[0].weights);
}

TEST_CASE("[data] train is the one-source case", "[config][mixture]") {
  const RunSpec s = parse("[data]\ntrain = \"d/train\"\nval = \"d/val\"\n");
  REQUIRE(s.data.sources.size() == 2);
  CHECK(s.data.sources[0].name == "train");
  CHECK(s.data.sources[0].weight == 1);
  CHECK(s.data.sources[1].split == "val");
  const RunSpec r = parse_run_spec(resolved_toml(s), "resolved.toml");
  CHECK(r.data.sources.size() == 2);  // written as the keys, not as tables too
}

TEST_CASE("bad mixtures name the key and the line", "[config][mixture]") {
  const std::string one = "\n[[data.sources]]\nuri = \"a\"\nweight = 1\n";
  CHECK_THAT(error_of("\n[[data.sources]]\nuri = \"a\"\nweight = -1\n"),
             Catch::Contains("spec.toml:10") && Catch::Contains("weight = -1 must be a finite number >= 0"));
  CHECK_THAT(error_of("\n[[data.sources]]\nuri = \"a\"\nweight = nan\n"), Catch::Contains("must be a finite number"));
  CHECK_THAT(error_of("\n[[data.sources]]\nuri = \"a\"\n"),
             Catch::Contains("spec.toml:10") && Catch::Contains("weight is missing"));
  CHECK_THAT(error_of("\n[[data.sources]]\nuri = \"a\"\nweight = 0\n[[data.sources]]\nuri = \"b\"\nweight = 0\n"),
             Catch::Contains("every training source has weight 0"));
  CHECK_THAT(error_of(one + "[[data.sources]]\nuri = \"a/\"\nweight = 2\n"),
             Catch::Contains("spec.toml:13") && Catch::Contains("listed twice (also at spec.toml:10)"));
  CHECK_THAT(error_of(one + "[[data.sources]]\nuri = \"b\"\nname = \"a\"\nweight = 2\n"),
             Catch::Contains("name 'a' is used twice"));
  // Hardening round 4, item 6: one source under other spellings trained its windows twice a batch
  {
    namespace fs = std::filesystem;
    const fs::path root = fs::temp_directory_path() / "zt_same_source";
    fs::remove_all(root);
    fs::create_directories(root / "dir" / "train");
    fs::create_directory_symlink(root / "dir" / "train", root / "link");
    const std::string train = (root / "dir" / "train").string();
    for (const std::string& other : {(root / "dir" / "." / "train").string(), (root / "link").string(),
                                     "file://" + train, (root / "dir" / "x" / ".." / "train/").string()}) {
      CAPTURE(other);
      CHECK_THAT(error_of("\n[[data.sources]]\nuri = \"" + train + "\"\nweight = 1\n[[data.sources]]\nuri = \"" +
                          other + "\"\nname = \"b\"\nweight = 1\n"),
                 Catch::Contains("is listed twice (also at spec.toml:10): it names the same data as \"" + train + "\""));
    }
    for (const auto& [a, b] : {std::pair{"s3://bucket/web/train", "S3://bucket/web/./train/"},
                               {"https://host/books", "https://user:pw@HOST:443/books//"},
                               {"http://host/books", "http://host:80/books"}}) {
      CAPTURE(a, b);
      CHECK_THAT(error_of(std::string("\n[[data.sources]]\nuri = \"") + a + "\"\nweight = 1\n[[data.sources]]\nuri = \"" +
                          b + "\"\nname = \"b\"\nweight = 1\n"),
                 Catch::Contains("is listed twice"));
    }
    // a port that is not the scheme's default, and an S3 bucket of another case, are other sources
    CHECK(parse("\n[[data.sources]]\nuri = \"http://h:443/x\"\nweight = 1\n[[data.sources]]\nuri = \"http://h/x\"\n"
                "name = \"b\"\nweight = 1\n").data.sources.size() == 2);
    CHECK(parse("\n[[data.sources]]\nuri = \"s3://Bucket/x\"\nweight = 1\n[[data.sources]]\nuri = \"s3://bucket/x\"\n"
                "name = \"b\"\nweight = 1\n").data.sources.size() == 2);
    fs::remove_all(root);
  }
  CHECK_THAT(error_of("\n[[data.sources]]\nuri = \"a\"\nwieght = 1\n"), Catch::Contains("did you mean 'weight'?"));
  CHECK_THAT(error_of("\n[[data.sources]]\nweight = 1\n"), Catch::Contains("needs uri"));
  CHECK_THAT(error_of("\n[[data.sources]]\nuri = \"a\"\nsplit = \"test\"\nweight = 1\n"),
             Catch::Contains("split = 'test' is not one of"));
  CHECK_THAT(error_of(one + "[[data.sources]]\nuri = \"v\"\nsplit = \"val\"\nweight = 1\n"),
             Catch::Contains("a val source has none"));
  CHECK_THAT(error_of("[data]\ntrain = \"x\"\n" + one), Catch::Contains("both give training data"));
  CHECK_THAT(error_of(one + "[data.sources]\n"), Catch::Contains("spec.toml"));
  // stages
  CHECK_THAT(error_of(one + "[[data.stages]]\nstep = 100\nweights = { a = 1 }\n"),
             Catch::Contains("spec.toml:13") && Catch::Contains("not before [train] max_steps = 100"));
  CHECK_THAT(error_of(one + "[[data.stages]]\nstep = 50\nweights = { a = 1 }\n[[data.stages]]\nstep = 20\nweights = { a = 1 }\n"),
             Catch::Contains("spec.toml:16") && Catch::Contains("not after the previous stage's step 50"));
  CHECK_THAT(error_of(one + "[[data.stages]]\nstep = 0\nweights = { a = 1 }\n"), Catch::Contains("must be >= 1"));
  CHECK_THAT(error_of(one + "[[data.stages]]\nstep = 5\nweights = { b = 1 }\n"),
             Catch::Contains("weights.b: no training source is named 'b'"));
  CHECK_THAT(error_of(one + "[[data.sources]]\nuri = \"b\"\nweight = 1\n[[data.stages]]\nstep = 5\nweights = { a = 1 }\n"),
             Catch::Contains("source 'b' is missing"));
  CHECK_THAT(error_of(one + "[[data.stages]]\nstep = 5\nweights = { a = 0 }\n"), Catch::Contains("all 0"));
  CHECK_THAT(error_of(one + "[[data.stages]]\nstep = 5\nweights = { a = -2 }\n"), Catch::Contains("must be a finite number >= 0"));
  CHECK_THAT(error_of(one + "[[data.stages]]\nweights = { a = 1 }\n"), Catch::Contains("needs step"));
  CHECK_THAT(error_of(one + "[[data.stages]]\nstep = 5\n"), Catch::Contains("needs weights"));
  try {
    parse_run_spec(kHead + one, "spec.toml", {"data.sources=x"});
    FAIL("--set data.sources accepted");
  } catch (const UserError& e) {
    CHECK_THAT(e.what(), Catch::Contains("edit it in the spec file"));
  }
}
