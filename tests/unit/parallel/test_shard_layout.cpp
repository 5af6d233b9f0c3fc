// ZeRO shard arithmetic and this rank's states in global coordinates: every element of the model
// is held by exactly one shard, and the global runs of all ranks tile every full tensor exactly
// once (the property a checkpoint written piecewise by each rank relies on).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/backend/backend.h"
#include "engine/comm/topology.h"
#include "engine/core/rng.h"
#include "engine/parallel/param_store.h"
#include "engine/parallel/shard_layout.h"
#include "models/gpt2.h"
#include "models/llama.h"

using namespace zt;

TEST_CASE("shards of every unit cover each group element exactly once", "[zero][layout]") {
  const std::vector<size_t> groups = {1000, 37, 1, 4097};
  for (int parts : {1, 2, 3, 4}) {
    for (size_t pad_factor : {1, 2}) {
      const size_t pad = size_t(parts) * pad_factor, bucket = 256;
      std::vector<std::vector<int>> hits(groups.size());
      for (size_t g = 0; g < groups.size(); ++g) hits[g].assign(groups[g], 0);
      size_t full = 0, shard = 0;
      for (int r = 0; r < parts; ++r) {
        const ShardLayout L(groups, parts, r, bucket, pad);
        full = L.total_full();
        shard = L.total_shard();
        for (const ShardUnit& u : L.units()) {
          REQUIRE(u.padded % pad == 0);
          REQUIRE(u.len <= std::max(bucket / pad * pad, size_t(parts)));
          REQUIRE(u.shard * size_t(parts) == u.padded);
          for (size_t i = 0; i < L.my_len(u); ++i) hits[size_t(u.group)][u.begin + L.my_begin(u) + i]++;
        }
      }
      for (const auto& h : hits)
        for (int c : h) REQUIRE(c == 1);
      REQUIRE(shard * size_t(parts) == full);
    }
  }
}

TEST_CASE("cut groups: a unit begins at each cut, and only a group's last unit is padded", "[zero][layout][fp8]") {
  // ZeRO-3's FP8 weights as units of their own (param_store.h): cuts on multiples of pad (4 P)
  const std::vector<size_t> groups = {1000, 4096, 40};
  const std::vector<std::vector<size_t>> cuts = {{64, 576}, {1024, 2048, 2112}, {}};
  for (int parts : {1, 2, 4}) {
    const size_t pad = 4 * size_t(parts), bucket = 256;
    std::vector<std::vector<int>> hits(groups.size());
    for (size_t g = 0; g < groups.size(); ++g) hits[g].assign(groups[g], 0);
    for (int r = 0; r < parts; ++r) {
      const ShardLayout L(groups, parts, r, bucket, pad, cuts);
      for (size_t g = 0; g < groups.size(); ++g) {
        const std::vector<int>& us = L.group_units(int(g));
        for (size_t c : cuts[g])
          CHECK(std::any_of(us.begin(), us.end(), [&](int ui) { return L.units()[size_t(ui)].begin == c; }));
        for (size_t i = 0; i < us.size(); ++i) {
          const ShardUnit& u = L.units()[size_t(us[i])];
          REQUIRE(u.len <= bucket);
          // an element's place in the group's full layout is its place in the group
          REQUIRE(u.full_off - L.group_full_off(int(g)) == u.begin);
          if (i + 1 < us.size()) REQUIRE(u.padded == u.len);
          for (size_t c : cuts[g]) REQUIRE(!(u.begin < c && c < u.begin + u.len));  // no unit across a cut
          for (size_t k = 0; k < L.my_len(u); ++k) hits[g][u.begin + L.my_begin(u) + k]++;
        }
      }
    }
    for (const auto& h : hits)
      for (int c : h) REQUIRE(c == 1);
  }
  // a bucket below the padding: units of one padding each, still unpadded inside a run
  const ShardLayout tiny(groups, 2, 0, 4, 8, cuts);
  for (const ShardUnit& u : tiny.units()) REQUIRE(u.full_off - tiny.group_full_off(u.group) == u.begin);
  // a cut off the padding's multiples, outside its group or out of order: refused
  CHECK_THROWS(ShardLayout(groups, 2, 0, 256, 8, {{60}, {}, {}}));
  CHECK_THROWS(ShardLayout(groups, 2, 0, 256, 8, {{1000}, {}, {}}));
  CHECK_THROWS(ShardLayout(groups, 2, 0, 256, 8, {{64, 32}, {}, {}}));
}

TEST_CASE("the models' FP8 weights are their linear layers' weight tensors", "[zero][fp8]") {
  auto be = make_cpu_backend(1);
  const GPT2Config cfg{2, 4, 16, 48, 40, 8};
  GPT2 model(cfg, *be, 1, nullptr);
  CHECK(model.fp8_weights().empty());  // none before set_fp8
  model.set_fp8(Fp8Layers::All);
  const std::vector<Fp8WeightRange> ws = model.fp8_weights();
  REQUIRE(ws.size() == 4 * size_t(cfg.n_layer));
  const std::vector<std::string> names = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                                          "mlp.c_proj.weight"};
  for (size_t i = 0; i < ws.size(); ++i) {
    const ParamGroup& g = model.groups()[size_t(ws[i].group)];
    const ParamInfo* found = nullptr;
    for (size_t p = g.first_param; p < g.first_param + g.n_params; ++p)
      if (model.table().group_rel(p) == int64_t(ws[i].rel)) found = &model.params()[p];
    REQUIRE(found != nullptr);
    CHECK(found->name == "transformer.h." + std::to_string(i / 4) + "." + names[i % 4]);
    CHECK(found->numel == ws[i].numel);
  }
  // Llama's packed q|k|v and gate|up: runs of tensors that start at q_proj's and gate_proj's, with
  // Qwen's biases and norms between the weights
  for (const auto& [bias, norm] : {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
    LlamaConfig lc;
    lc.n_layer = 2, lc.n_head = 4, lc.n_kv_head = 2, lc.d_model = 32, lc.d_ff = 64, lc.vocab_size = 40, lc.seq_len = 8;
    lc.qkv_bias = bias, lc.qk_norm = norm;  // Qwen2's biases, Qwen3's norms
    Llama llama(lc, *be, 1);
    llama.set_fp8(Fp8Layers::All);
    const std::vector<Fp8WeightRange> lw = llama.fp8_weights();
    REQUIRE(lw.size() == 8);
    const std::vector<std::pair<std::string, size_t>> first = {
        {"self_attn.q_proj.weight", 64 * 32}, {"self_attn.o_proj.weight", 32 * 32},
        {"mlp.gate_proj.weight", 2 * 64 * 32}, {"mlp.down_proj.weight", 32 * 64}};
    for (size_t i = 0; i < lw.size(); ++i) {
      const ParamGroup& g = llama.groups()[size_t(lw[i].group)];
      std::string name;
      for (size_t p = g.first_param; p < g.first_param + g.n_params; ++p)
        if (llama.table().group_rel(p) == int64_t(lw[i].rel)) name = llama.params()[p].name;
      CHECK(name == "model.layers." + std::to_string(i / 4) + "." + first[i % 4].first);
      CHECK(lw[i].numel == first[i % 4].second);
    }
  }
}

namespace {
// A tensor-parallel group of `size` that only reports its shape: the model and the state
// placement build their tables without communicating.
class ShapeOnlyComm final : public Comm {
 public:
  ShapeOnlyComm(int size, int rank) : size_(size), rank_(rank) {}
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  std::string name() const override { return "shape-only"; }
  Handle all_reduce(float*, size_t, ReduceOp) override { FAIL("no collective expected"); return 0; }
  Handle reduce_scatter(const float*, float*, size_t) override { FAIL("no collective expected"); return 0; }
  Handle all_gather(const float*, float*, size_t) override { FAIL("no collective expected"); return 0; }
  Handle broadcast(float*, size_t, int) override { FAIL("no collective expected"); return 0; }
  void wait(Handle) override {}
  void all_reduce_doubles(double*, size_t) override { FAIL("no collective expected"); }
  void barrier() override {}

 private:
  int size_, rank_;
};
}  // namespace

TEST_CASE("global runs of all tensor-parallel ranks tile every full tensor once, with its values",
          "[zero][checkpoint]") {
  auto be = make_cpu_backend(1);
  const GPT2Config cfg{2, 4, 16, 48, 40, 8};
  const uint64_t seed = 9;
  for (int TP : {1, 2, 4}) {
    for (int stage : {0, 3}) {
      std::map<std::string, std::vector<int>> owned;  // tensor -> owners per global element
      for (int r = 0; r < TP; ++r) {
        ShapeOnlyComm tp(TP, r);
        GPT2 model(cfg, *be, 1, &tp);
        Topology topo;
        topo.tp = TP;
        topo.tp_rank = r;
        topo.world = make_self_comm("world");
        topo.tp_group = make_self_comm("tp");
        topo.dp_group = make_self_comm("dp");
        RunSpec spec;
        spec.parallel.zero_stage = stage;
        spec.parallel.bucket_mb = 0.001;  // many units: runs cut at unit boundaries
        ParamStore store(model.table(), *be, topo, spec);
        store.init(seed);
        std::vector<float> vals;
        for (const auto& run : store.global_runs()) {
          const ParamInfo& p = model.params()[size_t(run.param)];
          auto& hits = owned[p.name];
          hits.resize(p.global_numel);
          vals.resize(run.n);
          store.read_run(ParamStore::State::Master, run, vals.data());
          for (size_t i = 0; i < run.n; ++i) {
            const size_t g = run.global_begin + i;
            REQUIRE(g < p.global_numel);
            if (run.owner) hits[g]++;
            const float want = p.init_std == 0 ? p.init_value
                                               : float(normal_at(seed, name_hash(p.name), g) * double(p.init_std));
            REQUIRE(vals[i] == want);
          }
        }
      }
      REQUIRE(owned.size() == size_t(2 + 12 * cfg.n_layer + 2));
      for (const auto& [name, hits] : owned)
        for (int h : hits) REQUIRE(h == 1);
    }
  }
}
