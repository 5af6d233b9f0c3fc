// The planner on its own (engine/plan): its books of model states are the real store's, to the
// byte, for every ZeRO stage and tier at world size 1 (the same code allocates both); a larger
// world shards them; the start-up memory check refuses with the plan's peak and the offload
// setting that fits, and refuses a spec too large to plan without building it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <string>

#include "engine/comm/topology.h"
#include "engine/core/status.h"
#include "engine/hf/spec_loading.h"
#include "engine/model/registry.h"
#include "engine/parallel/param_store.h"
#include "engine/plan/layout_plan.h"
#include "engine/plan/memory_check.h"
#include "engine/plan/planned_job.h"
#include "tests/unit/plan/plan_test_spec.h"

using namespace zt;

namespace {
using testing::kPlanSpec;

RunSpec spec(std::vector<std::string> sets = {}) {
  sets.push_back("run.threads=1");
  return parse_run_spec(kPlanSpec, "plan.toml", sets);
}

// The real store's model-state bytes on a CPU backend at world size 1, by tag, as allocated.
MemoryStats real_store(const RunSpec& s) {
  auto be = make_cpu_backend(1);
  be->set_compute_dtype(s.precision.compute == PrecisionChoice::Bf16 ? DType::BF16 : DType::F32);
  Topology t;
  t.world = make_self_comm("world");
  t.tp_group = make_self_comm("tp");
  t.dp_group = make_self_comm("dp");
  auto model = make_model(s.model, *be, int(s.train.micro_batch), t.tp_group.get());
  const MemoryStats before = be->memory_stats();
  ParamStore store(model->table(), *be, t, s);
  MemoryStats after = be->memory_stats();
  for (size_t k = 0; k < size_t(MemTag::kCount); ++k) after.by_tag[k] -= before.by_tag[k];
  after.pinned_host -= before.pinned_host;
  return after;
}
}  // namespace

TEST_CASE("the plan's model states are the real store's, to the byte", "[plan]") {
  const std::string nvme = (std::filesystem::temp_directory_path() / "zt_plan_unit").string();
  std::filesystem::create_directories(nvme);
  for (const std::vector<std::string>& sets : std::vector<std::vector<std::string>>{
           {"parallel.zero_stage=0"},
           {"parallel.zero_stage=1", "precision.compute=bf16"},
           {"parallel.zero_stage=3", "offload.optimizer=cpu", "offload.params=cpu"},
           {"parallel.zero_stage=3", "offload.optimizer=nvme", "offload.params=nvme",
            "offload.nvme_path=\"" + nvme + "\""}}) {
    const RunSpec s = spec(sets);
    const LayoutPlan plan = plan_layout(s, 1, DeviceKind::CPU, nullptr);
    const MemoryStats real = real_store(s);
    INFO(sets.front() << " " << sets.back());
    // parameters, optimizer states and the pinned tiers are the store's alone
    REQUIRE(plan.memory.peak_by_tag[size_t(MemTag::OptimStates)] == real.by_tag[size_t(MemTag::OptimStates)]);
    REQUIRE(plan.memory.peak_by_tag[size_t(MemTag::Params)] == real.by_tag[size_t(MemTag::Params)]);
    REQUIRE(plan.memory.pinned_host == real.pinned_host);
  }
  std::filesystem::remove_all(nvme);
}

TEST_CASE("ZeRO shards the planned states over the data-parallel ranks", "[plan]") {
  const LayoutPlan one = plan_layout(spec({"parallel.zero_stage=3"}), 1, DeviceKind::CPU, nullptr);
  const LayoutPlan four = plan_layout(spec({"parallel.zero_stage=3"}), 4, DeviceKind::CPU, nullptr);
  REQUIRE(four.data == 4);
  const size_t m1 = one.memory.peak_by_tag[size_t(MemTag::OptimStates)];
  const size_t m4 = four.memory.peak_by_tag[size_t(MemTag::OptimStates)];
  REQUIRE(m4 < m1);
  REQUIRE(m4 * 4 >= m1);  // each rank holds a quarter, padded
  REQUIRE_THROWS_AS(plan_layout(spec({"parallel.tensor=2"}), 3, DeviceKind::CPU, nullptr), UserError);
}

TEST_CASE("the memory check refuses with the plan's peak and the offload that fits", "[plan]") {
  const RunSpec s = spec();
  const LayoutPlan plan = plan_layout(s, 1, DeviceKind::CPU, nullptr);
  MemoryBudget b;
  b.where = "[run] device_memory_limit";
  b.device = plan.peak_device();  // exactly enough
  REQUIRE(check_memory_fits(s, 1, DeviceKind::CPU, DType::F32, b).peak_device() == plan.peak_device());
  b.device = plan.peak_device() - 1;
  try {
    check_memory_fits(s, 1, DeviceKind::CPU, DType::F32, b);
    FAIL("no refusal one byte short");
  } catch (const UserError& e) {
    const std::string m = e.what();
    REQUIRE(m.find("this spec needs at least") != std::string::npos);
    REQUIRE(m.find(std::to_string(plan.peak_device()) + " bytes needed") != std::string::npos);
    REQUIRE(m.find("[offload]") != std::string::npos);  // optimizer offload fits one byte less
  }
}

TEST_CASE("a spec too large to plan is refused from its footprint, at once", "[plan]") {
  const RunSpec s = spec({"model.n_layer=100000000"});
  MemoryBudget b;
  b.where = "this machine";
  b.device = size_t(64) << 30;
  b.pinned = double(size_t(32) << 30);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(check_memory_fits(s, 1, DeviceKind::CPU, DType::F32, b),
                      Catch::Contains("gradient shard") && Catch::Contains("this spec needs at least"));
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // not built: that takes minutes
}

// "Not supported" is a start-up error because a run asks the backend, before anything is built,
// for every op it will call (registry.h, run_ops). That list must hold every op the step, an
// evaluation forward and sampling really call: the counting backend records each op by name.
TEST_CASE("a run asks the backend for every op its step, evaluation and sampling call", "[plan][backend]") {
  for (const char* arch : {"gpt2", "llama", "mistral", "qwen2", "qwen3"})
    for (const char* recompute : {"none", "selective", "full"})
      for (const DeviceKind kind : {DeviceKind::CPU, DeviceKind::CUDA}) {
        CAPTURE(arch, recompute, int(kind));
        const RunSpec s = spec({std::string("model.arch=") + arch, std::string("train.recompute=") + recompute,
                                "optim.grad_clip=1.0"});
        PlannedJob planned(s, 1, kind);
        planned.step();
        Job& job = planned.job();
        job.model->forward(job.inputs.data(), nullptr, 1, int(s.model.seq_len), 0.0f);  // evaluation, sampling
        std::vector<float> row(size_t(job.model->vocab_size()));
        job.model->logits_row(0, int(s.model.seq_len) - 1, row.data());
        std::set<std::string> asked;
        for (const Backend::OpRequest& r : run_ops(s.model, planned.backend().compute_dtype())) asked.insert(r.op);
        // the ops a backend may lack (Backend::op_names; conversions and copies every backend has)
        const std::vector<std::string>& ops = Backend::op_names();
        std::set<std::string> called;
        for (const std::string& op : planned.backend().ops_called())
          if (std::find(ops.begin(), ops.end(), op) != ops.end()) called.insert(op);
        REQUIRE(called.size() > 10);
        for (const std::string& op : called) {
          CAPTURE(op);
          REQUIRE(asked.count(op) == 1);
        }
      }
}
