// The state tiers on their own (engine/offload/state_tier.h): each holds what is written to it; the
// NVMe tier streams every block once, in order, writes back what the step changed (also with the
// first blocks read ahead by prefetch), keeps ZeRO-3's compute shards in their file for the
// read-ahead ring; the planner's tier counts the same pinned bytes and creates no file.
#include <catch2/catch.hpp>

#include <chrono>

#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/offload/state_tier.h"
#include "engine/plan/plan_backend.h"

using namespace zt;

namespace {
std::string temp_dir(const char* name) {
  const auto d = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}
ZeroPlacement placement(ZeroPlacement::Tier opt, ZeroPlacement::Tier params, const std::string& dir) {
  ZeroPlacement p;
  p.stage = 3;
  p.optimizer = opt, p.params = params;
  p.nvme_path = dir;
  p.buffer_mb = 2048 * 4 / 1048576.0;  // blocks of 2048 elements: several blocks below
  p.io_depth = 2;
  p.host_threads = 1;
  return p;
}
TierShape shape(size_t flat, DType compute) {
  TierShape s;
  s.flat = flat, s.master_elems = flat, s.compute = compute;
  s.largest_group_shard_bytes = 3000 * dtype_size(compute);
  return s;
}
}  // namespace

TEST_CASE("device and pinned tiers hold what is written, in the memory they say", "[offload][tier]") {
  auto be = make_cpu_backend(1);
  OffloadClock clock;
  const size_t n = 5000;
  std::vector<float> x(n), back(n);
  std::iota(x.begin(), x.end(), 0.25f);
  for (auto kind : {ZeroPlacement::Tier::Device, ZeroPlacement::Tier::Pinned}) {
    auto tier = make_state_tier(*be, placement(kind, ZeroPlacement::Tier::Device, ""), shape(n, DType::F32), clock);
    const bool pinned = kind == ZeroPlacement::Tier::Pinned;
    REQUIRE(tier->offloaded() == pinned);
    REQUIRE_FALSE(tier->streams());
    REQUIRE((tier->grad() != nullptr) == pinned);  // the device tier uses ZeRO's own gradient
    REQUIRE((&tier->backend() == be.get()) == !pinned);  // AdamW runs on a host backend when pinned
    REQUIRE((&tier->owner(tier->m() + 7, *be) == &tier->backend()));
    for (StateKind s : {StateKind::Master, StateKind::AdamM, StateKind::AdamV}) {
      tier->write(s, 0, x.data(), n);
      tier->read(s, 0, back.data(), n);
      REQUIRE(back == x);
    }
    const StateTier::Bytes b = tier->bytes();
    REQUIRE(b.pinned[2] == (pinned ? 2.0 * n * 4 : 0.0));
  }
}

TEST_CASE("the NVMe tier streams every block once and keeps what the step wrote", "[offload][tier][nvme]") {
  const std::string dir = temp_dir("zt_tier_nvme");
  auto be = make_cpu_backend(1);
  OffloadClock clock;
  double observed_ms = 0;  // the waits the clock reports one by one (the trace's)
  int observed = 0;
  clock.set_observer([&](const char*, std::chrono::steady_clock::time_point, double ms) { observed_ms += ms, ++observed; });
  const size_t n = 5000;  // blocks of 2048: 2048, 2048, 904
  auto tier = make_state_tier(*be, placement(ZeroPlacement::Tier::Nvme, ZeroPlacement::Tier::Device, dir),
                              shape(n, DType::F32), clock);
  REQUIRE(tier->streams());
  REQUIRE(tier->nvme_file() != nullptr);
  REQUIRE(tier->masters() == nullptr);  // in the file, not in memory
  std::vector<float> x(n), back(n);
  std::iota(x.begin(), x.end(), 1.0f);
  tier->write(StateKind::Master, 0, x.data(), n);
  tier->write(StateKind::AdamM, 0, x.data(), n);
  tier->write(StateKind::AdamV, 0, x.data(), n);
  for (int pass = 0; pass < 2; ++pass) {  // the second pass with the first blocks read ahead
    if (pass == 1) tier->prefetch();
    std::vector<size_t> begins;
    tier->stream(true, true, [&](size_t b0, size_t len, float* master, float* m, float* v, void* compute) {
      begins.push_back(b0);
      REQUIRE(compute == nullptr);  // the compute shards are not on NVMe here
      for (size_t i = 0; i < len; ++i) {
        REQUIRE(master[i] == float(b0 + i + 1) + float(pass));  // what the previous pass wrote
        master[i] += 1, m[i] += 2, v[i] += 3;
      }
    });
    REQUIRE(begins == std::vector<size_t>{0, 2048, 4096});
  }
  tier->read(StateKind::AdamV, 0, back.data(), n);
  for (size_t i = 0; i < n; ++i) REQUIRE(back[i] == x[i] + 6);
  // a pass without write-back changes nothing in the file
  tier->stream(false, false, [&](size_t, size_t len, float* master, float* m, float*, void*) {
    REQUIRE(m == nullptr);
    for (size_t i = 0; i < len; ++i) master[i] = -1;
  });
  tier->read(StateKind::Master, 0, back.data(), n);
  for (size_t i = 0; i < n; ++i) REQUIRE(back[i] == x[i] + 2);
  // every NVMe read the step waited for went through the clock: what it reports one by one is
  // what it counts (the breakdown's "offload" and the trace's offload track agree)
  REQUIRE(observed >= 3);  // at least the first pass's three blocks
  REQUIRE(clock.waited_ms() == observed_ms);
  tier.reset();
  REQUIRE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

TEST_CASE("parameters on NVMe: the step's compute blocks come back through the read-ahead ring",
          "[offload][tier][nvme]") {
  const std::string dir = temp_dir("zt_tier_params");
  auto be = make_cpu_backend(1);
  OffloadClock clock;
  const size_t n = 6144;
  auto tier = make_state_tier(*be, placement(ZeroPlacement::Tier::Nvme, ZeroPlacement::Tier::Nvme, dir),
                              shape(n, DType::BF16), clock);
  REQUIRE(tier->compute() == nullptr);  // the step writes the compute shards to their file
  std::vector<float> zeros(n, 0.0f);
  for (StateKind s : {StateKind::Master, StateKind::AdamM, StateKind::AdamV}) tier->write(s, 0, zeros.data(), n);
  // the step writes each block's compute shard: element i holds the 16-bit pattern i
  tier->stream(true, true, [&](size_t b0, size_t len, float*, float*, float*, void* compute) {
    REQUIRE(compute != nullptr);
    auto* c = static_cast<uint16_t*>(compute);
    for (size_t i = 0; i < len; ++i) c[i] = uint16_t(b0 + i);
  });
  // groups of 3000 elements at unaligned offsets, read ahead and taken in a pass's order
  const uint64_t group_begin[3] = {0, 3000 * 2, 5000 * 2};
  const size_t group_bytes[3] = {3000 * 2, 2000 * 2, 1144 * 2};
  tier->read_ahead(1, group_begin[1], group_bytes[1]);
  for (int g : {0, 1, 2}) {
    const auto* c = static_cast<const uint16_t*>(tier->take(g, group_begin[g], group_bytes[g]));
    REQUIRE(c != nullptr);
    for (size_t i = 0; i < group_bytes[g] / 2; ++i) REQUIRE(c[i] == uint16_t(group_begin[g] / 2 + i));
    tier->uploaded(g, 0);
  }
  std::vector<char> scratch;
  const auto* all = static_cast<const uint16_t*>(tier->compute_shards(scratch));
  REQUIRE(all[6143] == 6143);
  tier.reset();
  std::filesystem::remove_all(dir);
}

TEST_CASE("the planner's NVMe tier counts the real tier's pinned bytes and touches no file", "[offload][tier][plan]") {
  const std::string dir = temp_dir("zt_tier_counted");
  auto be = make_cpu_backend(1);
  PlanBackend plan(DeviceKind::CPU);  // rounds as the CPU backend does
  OffloadClock clock;
  ZeroPlacement p = placement(ZeroPlacement::Tier::Nvme, ZeroPlacement::Tier::Nvme, dir);
  const size_t pinned_before = be->memory_stats().pinned_host;
  auto real = make_state_tier(*be, p, shape(6144, DType::BF16), clock);
  const size_t real_pinned = be->memory_stats().pinned_host - pinned_before;
  p.count_only = true;
  p.nvme_path = dir + "/does-not-exist";  // no file: the path is never opened
  auto counted = make_state_tier(plan, p, shape(6144, DType::BF16), clock);
  REQUIRE(plan.memory_stats().pinned_host == real_pinned);
  const StateTier::Bytes a = real->bytes(), b = counted->bytes();
  for (int k = 0; k < 3; ++k) REQUIRE((a.nvme[k] == b.nvme[k] && a.pinned[k] == b.pinned[k]));
  REQUIRE(counted->nvme_file() == nullptr);
  int blocks = 0;
  counted->stream(true, true, [&](size_t, size_t, float*, float*, float*, void*) { ++blocks; });
  REQUIRE(blocks == 3);
  REQUIRE_FALSE(std::filesystem::exists(p.nvme_path));
  REQUIRE_THROWS(counted->read(StateKind::Master, 0, nullptr, 0));
  real.reset();
  std::filesystem::remove_all(dir);
}
