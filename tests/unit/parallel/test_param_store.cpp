// ParamStore on its own: every ZeRO stage over every tier of the optimizer states (device, pinned
// host memory, NVMe) and of ZeRO-3's parameters trains the same model to the same bits at world
// size 1 (one data-parallel rank: the stages differ only in where states live and which
// collectives run), and its tier books add up.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/comm/topology.h"
#include "engine/optim/adamw.h"
#include "engine/optim/optimizer_step.h"
#include "engine/parallel/param_store.h"
#include "models/gpt2.h"

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

// Three steps of a tiny GPT-2 on fixed tokens through a store of `place`, the optimizer as the
// trainer runs it; the final parameters and the last step's reduced gradients.
Trained train(const ZeroPlacement& place, bool early_update = false) {
  auto be = make_cpu_backend(1);
  const GPT2Config cfg{2, 2, 16, 64, 50, 8};
  GPT2 model(cfg, *be, 2);
  const Topology topo = self_topology();
  ParamStore store(model, *be, topo, place);
  store.init(5);
  model.set_provider(&store);
  RunSpec::Optim o;
  o.weight_decay = 0.1;
  AdamW opt(o, store.optimizer_backend());
  std::vector<int32_t> in(16), tgt(16);
  for (int i = 0; i < 16; ++i) in[size_t(i)] = (i * 7) % 50, tgt[size_t(i)] = (i * 11 + 3) % 50;
  Trained out;
  for (int t = 1; t <= 3; ++t) {
    store.zero_grad();
    const bool early = early_update && schedule_early_adamw(store, opt, 1e-2, t);
    REQUIRE(early == early_update);  // it applies where asked for here (offload to pinned memory, ZeRO >= 2)
    store.set_last_micro_batch(true);
    model.forward_deferred(in.data(), tgt.data(), 2, 8, 1.0f / 16);
    model.backward();
    store.finish_backward();
    if (t == 3) out.grads = store.full_grads();
    adamw_step(store, opt, 1e-2, t);
    store.publish_params();
  }
  out.params = store.full_params();
  out.tiers = store.tier_bytes();
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
