// ParamStore on its own: every ZeRO stage over every tier of the optimizer states (device, pinned
// host memory, NVMe) and of ZeRO-3's parameters trains the same model to the same bits at world
// size 1 (one data-parallel rank: the stages differ only in where states live and which
// collectives run), and its tier books add up.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/backend/fp8_recipe.h"
#include "engine/comm/topology.h"
#include "engine/job/job.h"
#include "engine/job/step.h"

using namespace zt;

namespace {
using Tier = ZeroPlacement::Tier;

Topology self_topology() {
  Topology t;
  t.world = make_self_comm("world");
  t.tp_group = make_self_comm("tp");
  t.dp_group = make_self_comm("dp");
  return t;
}

struct Trained {
  std::vector<float> params, grads;
  ParamStore::TierBytes tiers;
  MemoryStats memory;
};

// Three steps of a tiny GPT-2 on fixed tokens through a store of `place`: the job and the step
// the trainer runs (engine/job); the final parameters and the last step's reduced gradients.
// Clipping at a norm it never reaches keeps the early host AdamW off (it needs grad_clip = 0)
// without changing a bit; `early_update` sets grad_clip = 0, where the placement allows it.
Trained train(const ZeroPlacement& place, bool early_update = false) {
  auto be = make_cpu_backend(1);
  Topology topo = self_topology();
  RunSpec spec;
  spec.model.n_layer = 2, spec.model.n_head = 2, spec.model.n_kv_head = 2, spec.model.d_model = 16;
  spec.model.d_ff = 64, spec.model.vocab_size = 50, spec.model.seq_len = 8, spec.model.vocab_multiple = 1;
  spec.train.micro_batch = 2, spec.train.global_batch = 2, spec.train.max_steps = 3;
  spec.optim.lr = 1e-2, spec.optim.schedule = LrSchedule::Constant, spec.optim.warmup_steps = 0, spec.optim.weight_decay = 0.1;
  spec.optim.grad_clip = early_update ? 0 : 1e30;
  Job job(spec, topo, *be, place);
  job.init_params(5);
  Trained out;
  struct LastGrads final : StepHook {  // the reduced gradients, before AdamW
    Job& job;
    std::vector<float>* grads;
    LastGrads(Job& j, std::vector<float>* g) : job(j), grads(g) {}
    void gradients_final(int64_t step) override {
      if (step == 2) *grads = job.store->full_grads();
    }
  } last_grads(job, &out.grads);
  for (int64_t step = 0; step < 3; ++step) {
    const StepResult r = train_step(job, step, [](int64_t, MicroBatch& mb) {
      for (int i = 0; i < 16; ++i) mb.inputs[i] = (i * 7) % 50, mb.targets[i] = (i * 11 + 3) % 50;
      mb.positions = nullptr;
    }, last_grads);
    REQUIRE(!r.skipped);
    REQUIRE(r.early_update == early_update);  // it applies where asked for here (offload to pinned memory, ZeRO >= 2)
  }
  out.params = job.store->full_params();
  out.tiers = job.store->tier_bytes();
  out.memory = be->memory_stats();
  return out;
}
}  // namespace

TEST_CASE("every ZeRO stage and state tier trains to the same bits at world size 1", "[zero][offload]") {
  const std::string nvme = (std::filesystem::temp_directory_path() / "zt_param_store_nvme").string();
  std::filesystem::create_directories(nvme);
  ZeroPlacement base;
  base.bucket_mb = 0.001;  // several units per group
  base.nvme_path = nvme;
  base.buffer_mb = 0.0625;
  base.io_depth = 2;
  base.host_threads = 1;
  const Trained ref = train(base);
  REQUIRE(ref.tiers.pinned[0] == 0);  // nothing off the device
  for (int stage : {0, 1, 2, 3})
    for (Tier opt : {Tier::Device, Tier::Pinned, Tier::Nvme})
      for (Tier params : {Tier::Device, Tier::Pinned, Tier::Nvme}) {
        if (params != Tier::Device && (stage != 3 || opt == Tier::Device)) continue;  // ZeRO-3 with optimizer offload
        if (params == Tier::Nvme && opt != Tier::Nvme) continue;
        CAPTURE(stage, int(opt), int(params));
        ZeroPlacement p = base;
        p.stage = stage, p.optimizer = opt, p.params = params;
        const Trained got = train(p);
        REQUIRE(got.params == ref.params);
        REQUIRE(got.grads == ref.grads);
        // the tiers hold what the placement says: masters and moments off the device when offloaded
        const double moments_off = got.tiers.pinned[2] + got.tiers.nvme[2];
        REQUIRE((opt == Tier::Device) == (moments_off == 0));
        REQUIRE((opt == Tier::Nvme) == (got.tiers.nvme[2] > 0));
        // on NVMe the masters count as parameters (as many bytes as one moment); ZeRO-3's compute
        // shards on NVMe come on top
        REQUIRE((opt == Tier::Nvme) == (got.tiers.nvme[0] > 0));
        REQUIRE((params == Tier::Nvme) == (got.tiers.nvme[0] > got.tiers.nvme[2] / 2));
        if (opt != Tier::Device) REQUIRE(got.memory.by_tag[size_t(MemTag::OptimStates)] == 0);
      }
  // the early host AdamW (each group's update during backward) gives the same bits as the step's
  for (int stage : {2, 3}) {
    CAPTURE(stage);
    ZeroPlacement p = base;
    p.stage = stage, p.optimizer = Tier::Pinned;
    REQUIRE(train(p, /*early_update=*/true).params == ref.params);
  }
  std::filesystem::remove_all(nvme);
}

TEST_CASE("ZeRO-3's FP8 gather: the copy in the weight's place, in the passes whose rows are in 16s",
          "[zero][fp8]") {
  // A tiny GPT-2, every block layer in FP8 on the CPU reference, at ZeRO-3 on one rank: the store
  // holds each FP8 weight's E4M3 shard (cast at init) and a pass of FP8 products gathers it into
  // the weight's place; a pass of other rows gathers the compute type there instead, and the next
  // FP8 pass the copy again (the group, still gathered, regathered in the other form each time).
  auto be = make_cpu_backend(1);
  Topology topo = self_topology();
  RunSpec spec;
  spec.model.n_layer = 2, spec.model.n_head = 2, spec.model.n_kv_head = 2, spec.model.d_model = 32;
  spec.model.d_ff = 64, spec.model.vocab_size = 50, spec.model.seq_len = 16, spec.model.vocab_multiple = 1;
  spec.train.micro_batch = 2, spec.train.global_batch = 2;
  spec.precision.compute = PrecisionChoice::Bf16, spec.precision.fp8 = Fp8Recipe::Tensorwise;
  spec.precision.fp8_layers = Fp8Layers::All, spec.precision.fp8_reference = true;
  spec.parallel.zero_stage = 3;
  Job job(spec, topo, *be, ZeroPlacement(spec));
  job.init_params(5);
  ParamStore& store = *job.store;
  const std::vector<Fp8WeightRange> ws = job.model->fp8_weights();
  REQUIRE(ws.size() == 8);
  CHECK(store.fp8_gathered_weights() == 8);
  const size_t es = be->compute_size();
  const std::vector<float> compute = store.full_compute_params();  // the model's flat layout
  for (const bool fp8 : {true, false, true}) {
    store.set_fp8_products(fp8);
    store.begin_pass({1});
    const char* g = static_cast<const char*>(store.params(1));
    for (const Fp8WeightRange& w : ws) {
      if (w.group != 1) continue;
      const void* place = g + w.rel * es;
      const void* copy = store.gathered_fp8_copy(place);
      if (!fp8) {  // the compute type, in place
        CHECK(copy == nullptr);
        std::vector<float> got(w.numel);
        convert_host(got.data(), DType::F32, place, be->compute_dtype(), int64_t(w.numel));
        const size_t flat = job.model->groups()[1].offset + w.rel;
        CHECK(std::equal(got.begin(), got.end(), compute.begin() + int64_t(flat)));
        continue;
      }
      REQUIRE(copy == place);
      // fp8_weight_copy of the gathered compute values: its scales and bytes
      const size_t flat = job.model->groups()[1].offset + w.rel;
      std::vector<char> weight(w.numel * es);
      convert_host(weight.data(), be->compute_dtype(), compute.data() + flat, DType::F32, int64_t(w.numel));
      std::vector<char> want(size_t(fp8_recipe::weight_copy_bytes(int64_t(w.numel), 1)));
      be->fp8_weight_copy(want.data(), weight.data(), int(w.numel), 1);
      const char* got = static_cast<const char*>(copy);
      CHECK(std::equal(got + 4, got + 8, want.data() + 4));  // the inverse scale the products read
      CHECK(std::equal(got + fp8_recipe::kWeightScalesBytes, got + fp8_recipe::kWeightScalesBytes + w.numel,
                       want.data() + fp8_recipe::kWeightScalesBytes));
    }
  }
  store.release_params(1);
}
