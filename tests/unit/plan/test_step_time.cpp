// The planner's step time: the ring costs against nccl-tests' bus-bandwidth definitions, the links
// a group crosses, the overlap of the recorded timeline, and the collectives the real step records
// on the plan's communicators (a collective left out of the books is caught by its bytes).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/core/status.h"
#include "engine/hf/spec_loading.h"
#include "engine/plan/calibration_file.h"
#include "engine/plan/collective_cost.h"
#include "engine/plan/layout_plan.h"
#include "engine/plan/machine_file.h"
#include "engine/plan/planned_job.h"
#include "tests/unit/plan/plan_test_spec.h"
#include "engine/plan/step_time.h"
#include "engine/train/link_probe.h"

using namespace zt;

TEST_CASE("collective costs follow nccl-tests' bus bandwidth", "[plan][comm]") {
  // nccl-tests (doc/PERFORMANCE.md): busbw = algbw x 2(n-1)/n (all-reduce), (n-1)/n (all-gather,
  // reduce-scatter; S the whole buffer), 1 (broadcast)
  for (const int n : {2, 3, 8, 64}) {
    CHECK(bus_factor(CollectiveKind::AllReduce, n) == Approx(2.0 * (n - 1) / n));
    CHECK(bus_factor(CollectiveKind::AllGather, n) == Approx(double(n - 1) / n));
    CHECK(bus_factor(CollectiveKind::ReduceScatter, n) == Approx(double(n - 1) / n));
    CHECK(bus_factor(CollectiveKind::Broadcast, n) == 1);
  }
  // a link at busbw B moves a collective of S bytes at algbw = B / factor: t = S x factor / B
  const Link link{"test", 100e9, 0};
  const double S = double(1 << 30);
  CHECK(collective_seconds(CollectiveKind::AllReduce, S, 8, link) == Approx(S * 2 * 7 / 8 / 100e9));
  CHECK(collective_seconds(CollectiveKind::AllGather, S, 8, link) == Approx(S * 7 / 8 / 100e9));
  CHECK(collective_seconds(CollectiveKind::AllReduce, S, 1, link) == 0);
  // the latency term: a ring's 2(n-1) steps for an all-reduce, n-1 for an all-gather, or a tree's
  // 2 log2 n and log2 n where fewer
  const Link slow{"test", 1e30, 1e-6};
  CHECK(collective_seconds(CollectiveKind::AllReduce, 0, 2, slow) == Approx(2e-6));
  CHECK(collective_seconds(CollectiveKind::AllReduce, 0, 8, slow) == Approx(6e-6));
  CHECK(collective_seconds(CollectiveKind::AllGather, 0, 8, slow) == Approx(3e-6));
  CHECK(collective_seconds(CollectiveKind::AllGather, 0, 512, slow) == Approx(9e-6));
  // a collective measured apart moves at its own bus bandwidth (Open MPI's reduce-scatter over TCP:
  // about a third of the all-gather's), the others at the all-reduce's
  Link measured{"tcp", 100e9, 0};
  measured.reduce_scatter_bytes_per_s = 50e9;
  CHECK(collective_seconds(CollectiveKind::ReduceScatter, S, 8, measured) == Approx(S * 7 / 8 / 50e9));
  CHECK(collective_seconds(CollectiveKind::AllGather, S, 8, measured) == Approx(S * 7 / 8 / 100e9));
  CHECK(collective_seconds(CollectiveKind::AllReduce, S, 8, measured) == Approx(S * 2 * 7 / 8 / 100e9));
}

TEST_CASE("doctor's link arithmetic recovers the latency and each collective's bus bandwidth", "[plan][comm]") {
  // times made from a known link by nccl-tests' model: t = steps x latency + S x factor / busbw
  const int n = 4;
  const double L = 10e-6, ar = 2e9, rs = 0.7e9, ag = 3e9, small = 4096, large = 16 << 20;
  auto t = [&](CollectiveKind k, double S, double bw) { return collective_steps(k, n) * L + S * bus_factor(k, n) / bw; };
  const Link l = link_from_times(n, small, t(CollectiveKind::AllReduce, small, ar), large,
                                 t(CollectiveKind::AllReduce, large, ar), t(CollectiveKind::ReduceScatter, large, rs),
                                 t(CollectiveKind::AllGather, large, ag));
  CHECK(l.step_latency_s == Approx(L));
  CHECK(l.bytes_per_s == Approx(ar));
  CHECK(l.reduce_scatter_bytes_per_s == Approx(rs));
  CHECK(l.all_gather_bytes_per_s == Approx(ag));
  // priced back, the measured sizes take the measured times
  CHECK(collective_seconds(CollectiveKind::ReduceScatter, large, n, l) == Approx(t(CollectiveKind::ReduceScatter, large, rs)));
  // a small run slowed by noise (slower than the large one): finite figures, the latency at most its time
  const Link noisy = link_from_times(n, small, 1.0, large, 0.5, 0.5, 0.5);
  CHECK(std::isfinite(noisy.bytes_per_s));
  CHECK(noisy.bytes_per_s > 0);
  CHECK(noisy.step_latency_s * collective_steps(CollectiveKind::AllReduce, n) <= 1.0);
}

TEST_CASE("a group's link: inside a machine, or the network through its members' NICs", "[plan][comm]") {
  const MachineProfile m = machine_profile("h100");  // 8 GPUs a machine
  CHECK(group_link(8, 1, m).name == m.intra.name);  // tensor 8: one machine
  CHECK(group_link(2, 4, m).name == m.intra.name);  // data 2 of tensor 4: ranks 0 and 4
  const Link dp_across = group_link(4, 4, m);       // ranks 0, 4, 8, 12: two a machine
  CHECK(dp_across.bytes_per_s == Approx(2 * m.network.bytes_per_s));
  CHECK(group_link(16, 8, m).bytes_per_s == Approx(m.network.bytes_per_s));  // one a machine
  CHECK(group_link(64, 1, m).bytes_per_s == Approx(std::min(m.intra.bytes_per_s, 8 * m.network.bytes_per_s)));
  // tensor 3 on 8-GPU machines: the group of ranks 6-8 crosses machines, and the job waits for it
  CHECK(group_link(3, 1, m, 24).name != m.intra.name);
  CHECK(group_link(4, 1, m, 16).name == m.intra.name);
  CHECK(group_link(3, 1, m, 3).name == m.intra.name);  // one machine holds the whole job
  // a collective's own figure crosses the network the same way: k members' NICs, at most the machine's
  MachineProfile tcp = m;
  tcp.network.reduce_scatter_bytes_per_s = m.network.bytes_per_s / 2;
  const Link rs = group_link(4, 4, tcp);
  CHECK(link_bus_bandwidth(rs, CollectiveKind::ReduceScatter) == Approx(m.network.bytes_per_s));
  CHECK(link_bus_bandwidth(rs, CollectiveKind::AllGather) == Approx(2 * m.network.bytes_per_s));
  CHECK_THROWS_AS(machine_profile("tpu"), UserError);
}

TEST_CASE("the step waits only where it waits: overlap from the recorded timeline", "[plan][comm]") {
  MachineProfile m = machine_profile("h100");
  m.intra = {"test", 1e9, 0};  // 1 GB/s: an all-gather of 2 GB over 2 ranks takes 1 s
  Calibration c;
  c.gemm = c.memory = c.vector = 1;
  // three ops of 1 s each (vector FLOPs at the GPU's fp32 peak)
  const double f = m.gpu.vector_tflops * 1e12;
  const std::vector<PlanBackend::Op> ops(3, PlanBackend::Op{f, 0, false, "add"});
  PlanBackend::Collective ag{CollectiveKind::AllGather, "dp", 2, 1, 2e9, 0, 2};
  // issued before op 0, waited before op 2: hidden behind two ops
  StepTime t = price_step(ops, {ag}, m, c);
  CHECK(t.compute_s == Approx(3));
  CHECK(t.comm_s == Approx(1));
  CHECK(t.step_s == Approx(3));
  CHECK(t.stalls.empty());
  // waited at once: all exposed, and named
  ag.waited_at = 0;
  t = price_step(ops, {ag}, m, c);
  CHECK(t.step_s == Approx(4));
  REQUIRE(t.stalls.size() == 1);
  CHECK(t.stalls[0].what == "all-gather over dp (2 ranks, test)");
  // never waited: the step ends when it has; two collectives of a group share its stream
  ag.waited_at = -1, ag.issued_at = 2;
  t = price_step(ops, {ag, ag}, m, c);
  CHECK(t.step_s == Approx(2 + 2));
  // another group's communicator has its own stream: the two run side by side
  PlanBackend::Collective tp = ag;
  tp.group = "tp";
  t = price_step(ops, {ag, tp}, m, c);
  CHECK(t.step_s == Approx(2 + 1));
  // MPI on host buffers moves the data only inside the wait: issued at op 0, waited at op 2, it
  // starts at op 2 and all of it is exposed
  ag.issued_at = 0, ag.waited_at = 2;
  CHECK(price_step(ops, {ag}, m, c, /*async=*/false).step_s == Approx(4));
  CHECK(price_step(ops, {ag}, m, c, /*async=*/true).step_s == Approx(3));
  // between the same two ops, in the order the step made them: a wait for dp before a world
  // collective is issued makes the world one start after the stall, not beside it
  PlanBackend::Collective dp = ag, world = ag;
  dp.bytes = 4e9;  // 2 s
  dp.issued_at = 0, dp.waited_at = 1, dp.issue_seq = 0, dp.wait_seq = 1;
  world.group = "world", world.issued_at = 1, world.waited_at = 1, world.issue_seq = 2, world.wait_seq = 3;
  // op 0 (1 s); the wait for dp (till 2 s); world issued then (till 3 s) and waited; ops 1, 2
  CHECK(price_step(ops, {dp, world}, m, c).step_s == Approx(5));
  world.issue_seq = 1, dp.wait_seq = 2;  // world issued before the wait: beside it, from 1 s to 2 s
  CHECK(price_step(ops, {dp, world}, m, c).step_s == Approx(4));
}

TEST_CASE("the step's compute by kind of op and communication by group add up to its totals", "[plan][comm]") {
  MachineProfile m = machine_profile("h100");
  m.intra = {"test", 1e9, 0};  // 1 GB/s
  Calibration c;
  c.gemm = c.memory = c.vector = 1;
  c.attention = {{64, 1024, 0.5, 0.5}};
  const double matrix = m.gpu.tflops * 1e12, vector = m.gpu.vector_tflops * 1e12;
  PlanBackend::Op attention{matrix, 0, true, "attention_forward"};
  attention.head_size = 64, attention.seq_len = 1024;
  // a GEMM of 1 s, attention of 2 s (half the peak), a memory-bound op of 1 s moving 3.35 TB
  const std::vector<PlanBackend::Op> ops = {{matrix, 1e9, true, "matmul_forward"}, attention,
                                            {vector / 1e3, m.gpu.bytes_per_s, false, "add"}};
  // dp: 2 s issued at op 0 and waited before op 2 (hidden behind the GEMM and the attention);
  // tp: 1 s waited at once before op 1 (exposed)
  // world: 2 s issued before the last op (1 s) and never waited for: the step ends when it has,
  // 1 s after that op
  PlanBackend::Collective dp{CollectiveKind::AllGather, "dp", 2, 1, 4e9, 0, 2}, tp = dp, world = dp;
  tp.group = "tp", tp.bytes = 2e9, tp.issued_at = 1, tp.waited_at = 1;
  world.group = "world", world.bytes = 4e9, world.issued_at = 2, world.waited_at = -1;
  const StepTime t = price_step(ops, {dp, tp, world}, m, c);
  CHECK(t.gemm.seconds == Approx(1));
  CHECK(t.gemm.flops == Approx(matrix));
  CHECK(t.attention.seconds == Approx(2));
  CHECK(t.other.seconds == Approx(1));
  CHECK(t.other.bytes == Approx(m.gpu.bytes_per_s));
  CHECK(t.gemm.seconds + t.attention.seconds + t.other.seconds == Approx(t.compute_s));
  REQUIRE(t.groups.size() == 3);
  CHECK(t.groups.at("dp").seconds == Approx(2));
  CHECK(t.groups.at("dp").stalled == Approx(0));
  CHECK(t.groups.at("tp").seconds == Approx(1));
  CHECK(t.groups.at("tp").stalled == Approx(1));
  CHECK(t.groups.at("tp").kind_seconds.at("all-gather") == Approx(1));
  CHECK(t.groups.at("world").seconds == Approx(2));
  CHECK(t.groups.at("world").stalled == Approx(1));
  CHECK(t.step_s == Approx(1 + 1 + 2 + 1 + 1));
  double seconds = 0, stalled = 0;
  for (const auto& [group, g] : t.groups) seconds += g.seconds, stalled += g.stalled;
  CHECK(seconds == Approx(t.comm_s));
  CHECK(stalled == Approx(t.exposed_s()));
}

TEST_CASE("attention runs at the efficiency measured at the nearest shape", "[plan]") {
  Calibration c;
  c.attention = {{64, 1024, 0.1, 0.2}, {128, 1024, 0.3, 0.4}, {128, 4096, 0.5, 0.6}};
  CHECK(c.attention_at(64, 1024).forward == 0.1);
  CHECK(c.attention_at(128, 1536).forward == 0.3);  // nearer 1024 than 4096 by ratio
  CHECK(c.attention_at(128, 2048).forward == 0.5);  // as near both: the longer
  CHECK(c.attention_at(128, 8192).backward == 0.6); // longer than any measured: the longest
  CHECK(c.attention_at(64, 8192).forward == 0.5);   // 64 at 1024 is 8x off in T; 128 at 4096 2x, and
                                                    // the other head size counts as 4x: a tie, the longer
  CHECK(default_calibration().attention.size() == 4);
}

namespace {
using testing::kPlanSpec;

// The bytes the planned step's collectives moved, by kind and group (nccl-tests' sizes).
std::map<std::pair<CollectiveKind, std::string>, double> recorded(const std::vector<std::string>& sets, int world) {
  PlannedJob planned(parse_run_spec(kPlanSpec, "plan.toml", sets), world, DeviceKind::CPU);
  planned.backend().reset_work();
  planned.step();
  std::map<std::pair<CollectiveKind, std::string>, double> out;
  for (const auto& c : planned.backend().collectives()) out[{c.kind, c.group}] += c.bytes;
  return out;
}
}  // namespace

TEST_CASE("the planned step records the collectives the layout issues, with their bytes", "[plan][comm]") {
  const RunSpec s = parse_run_spec(kPlanSpec, "plan.toml");
  PlannedJob one(s, 1, DeviceKind::CPU);
  const double params = double(one.job().model->num_params());  // fp32 on the CPU: 4 bytes each
  // ZeRO-0 over 2 data-parallel ranks: each parameter's gradient all-reduced once per step
  auto z0 = recorded({}, 2);
  CHECK(z0[{CollectiveKind::AllReduce, "dp"}] == Approx(4 * params).epsilon(0.01));
  // ZeRO-3: the parameters gathered for forward and again for backward in each of the 2
  // micro-batches of a rank (8 / (2 ranks x 2)), the gradients reduce-scattered once a micro-batch
  auto z3 = recorded({"parallel.zero_stage=3"}, 2);
  CHECK(z3[{CollectiveKind::AllGather, "dp"}] == Approx(2 * 2 * 4 * params).epsilon(0.01));
  CHECK(z3[{CollectiveKind::ReduceScatter, "dp"}] >= 4 * params);
  // tensor 2: the blocks' all-reduces of activations ride the tp group
  auto t2 = recorded({"parallel.tensor=2"}, 2);
  CHECK(t2[{CollectiveKind::AllReduce, "tp"}] > 0);
  // the loss and the gradient norm: small all-reduces of doubles over the world
  CHECK(z0[{CollectiveKind::AllReduce, "world"}] > 0);
}

TEST_CASE("sequence parallelism plans the tensor group's all-reduces as all-gathers and reduce-scatters", "[plan][comm]") {
  // Each (B*T, C) all-reduce of the blocks, the embedding and the head becomes a reduce-scatter
  // of the same buffer and, before the next column-parallel matmul, an all-gather of it: what
  // remains all-reduced over tp is the loss's rows and the norms' gradients, a few hundredths.
  auto t2 = recorded({"parallel.tensor=2"}, 2);
  auto sp = recorded({"parallel.tensor=2", "parallel.sequence_parallel=true"}, 2);
  CHECK(sp[{CollectiveKind::AllReduce, "tp"}] < 0.1 * t2[{CollectiveKind::AllReduce, "tp"}]);
  CHECK(sp[{CollectiveKind::ReduceScatter, "tp"}] > 0.9 * t2[{CollectiveKind::AllReduce, "tp"}]);
  CHECK(sp[{CollectiveKind::AllGather, "tp"}] > sp[{CollectiveKind::ReduceScatter, "tp"}]);  // backward gathers again
  CHECK(t2[{CollectiveKind::ReduceScatter, "tp"}] == 0);
  const RunSpec spec = parse_run_spec(kPlanSpec, "plan.toml", {"parallel.tensor=2", "parallel.sequence_parallel=true"});
  CHECK(plan_layout(spec, 2, DeviceKind::CPU, nullptr).layout() == "tensor 2 x data 1, ZeRO-0, sequence-parallel");
}

TEST_CASE("the tensor group's backward reductions are in flight during the weight-gradient GEMMs", "[plan][comm]") {
  // Megatron's overlap: a column-parallel Linear's input gradient is reduced while its weight
  // gradient is computed (and with sequence parallelism its input is gathered while the input
  // gradient is): one op between the collective's issue and its wait, at least, for each of the
  // 2 column-parallel Linears of each of the 2 layers, in each of the 2 micro-batches.
  for (const bool sp : {false, true}) {
    CAPTURE(sp);
    PlannedJob planned(parse_run_spec(kPlanSpec, "plan.toml", {"parallel.tensor=2",
                                                               sp ? "parallel.sequence_parallel=true" : "parallel.sequence_parallel=false"}),
                       2, DeviceKind::CPU);
    planned.backend().reset_work();
    planned.step();
    const auto& ops = planned.backend().ops();
    int overlapped_reductions = 0, overlapped_gathers = 0;
    for (const auto& c : planned.backend().collectives()) {
      if (c.group != "tp" || c.waited_at <= int64_t(c.issued_at)) continue;
      // what ran in between is a matrix product: the weight gradient's (or the input gradient's) GEMM
      bool gemm = false;
      for (int64_t i = int64_t(c.issued_at); i < c.waited_at; ++i) gemm |= ops[size_t(i)].matrix;
      CHECK(gemm);
      (c.kind == CollectiveKind::AllGather ? overlapped_gathers : overlapped_reductions) += 1;
    }
    CHECK(overlapped_reductions >= 2 * 2 * 2);
    CHECK(overlapped_gathers >= (sp ? 2 * 2 * 2 : 0));
  }
}

TEST_CASE("hybrid sharding plans ZeRO inside a replica and one all-reduce of the shard across replicas", "[plan][comm]") {
  const RunSpec s = parse_run_spec(kPlanSpec, "plan.toml");
  PlannedJob one(s, 1, DeviceKind::CPU);
  const double params = double(one.job().model->num_params());  // fp32 on the CPU: 4 bytes each
  // 4 data-parallel ranks in 2 replicas of 2, one micro-batch a rank (8 / 4 / 2)
  auto h = recorded({"parallel.zero_stage=3", "parallel.replicate=2", "train.micro_batch=2"}, 4);
  CHECK(h[{CollectiveKind::AllGather, "shard"}] == Approx(2 * 4 * params).epsilon(0.01));  // forward and backward
  CHECK(h[{CollectiveKind::ReduceScatter, "shard"}] >= 4 * params);
  // nccl-tests' S of an all-reduce is the buffer: each rank's shard, half the parameters
  CHECK(h[{CollectiveKind::AllReduce, "replica"}] == Approx(4 * params / 2).epsilon(0.01));
  CHECK(h[{CollectiveKind::AllGather, "dp"}] == 0);
  CHECK_THROWS_AS(recorded({"parallel.zero_stage=3", "parallel.replicate=3"}, 4), UserError);
  // on two 8-GPU machines over TCP, replicas of a machine keep ZeRO's gathers on NVLink: faster
  const RunSpec z3 = parse_run_spec(kPlanSpec, "plan.toml", {"parallel.zero_stage=3", "train.micro_batch=1",
                                                             "train.global_batch=16"});
  RunSpec hsdp = z3;
  hsdp.parallel.replicate = 2;
  const MachineProfile tcp = machine_profile("h100-tcp");
  const LayoutPlan plain = plan_layout(z3, 16, DeviceKind::CUDA, &tcp), hybrid = plan_layout(hsdp, 16, DeviceKind::CUDA, &tcp);
  CHECK(hybrid.time.step_s < plain.time.step_s);
  CHECK(hybrid.layout() == "tensor 1 x data 16, ZeRO-3 in 2 replicas");
}

TEST_CASE("a planned MFU stays under the peak and communication makes a layout slower", "[plan][comm]") {
  const RunSpec s = parse_run_spec(kPlanSpec, "plan.toml", {"parallel.zero_stage=3"});
  const MachineProfile fast = machine_profile("h100");
  MachineProfile slow = fast;
  slow.intra = {"slow", 1e6, 1e-3};
  const LayoutPlan a = plan_layout(s, 2, DeviceKind::CUDA, &fast), b = plan_layout(s, 2, DeviceKind::CUDA, &slow);
  CHECK(a.mfu > 0);
  CHECK(a.mfu < 1);
  CHECK(b.time.step_s > a.time.step_s);
  CHECK(b.time.exposed_s() > 0);
  CHECK(b.time.compute_s == Approx(a.time.compute_s));
}

TEST_CASE("a machine file changes a built-in profile, and a bad key is named with its line", "[plan][machine]") {
  const std::string dir = "/tmp/ztrain_test_machine_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& text) {
    std::ofstream(dir + "/m.toml") << text;
    return dir + "/m.toml";
  };
  const MachineProfile m = read_machine_profile(
      write("[machine]\nbase = \"a100\"\nprice_per_hour = 32.8\n[network]\nbus_gb_per_s = 3\nstep_latency_us = 30\n"));
  CHECK(m.gpu.tflops == 312);
  CHECK(m.price_per_hour == 32.8);
  CHECK(m.network.bytes_per_s == Approx(3e9));
  CHECK(m.network.step_latency_s == Approx(30e-6));
  CHECK(m.intra.bytes_per_s == machine_profile("a100").intra.bytes_per_s);
  auto error = [&](const std::string& text) {
    try {
      read_machine_profile(write(text));
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error("[network]\nbus_gbps = 3\n"), Catch::Contains("m.toml:2: unknown key [network] bus_gbps"));
  CHECK_THAT(error("[gpu]\ntflops = -1\n"), Catch::Contains("[gpu] tflops must be a positive number"));
  CHECK_THAT(error("[machine]\nbase = \"tpu\"\n"), Catch::Contains("[machine] base must be one of"));
  CHECK_THAT(error("[machine]\nname = \"x\"\n"), Catch::Contains("a machine needs [gpu] tflops"));
  // its own calibration: what its ops reach, in place of the default's
  const MachineProfile cpu = read_machine_profile(write(
      "[machine]\nbase = \"h100\"\n[calibration]\ngemm = 0.5\nmemory = 0.25\nattention_forward = 0.1\n"));
  REQUIRE(cpu.calibration);
  CHECK(cpu.calibration->gemm == 0.5);
  CHECK(cpu.calibration->memory == 0.25);
  CHECK(cpu.calibration->attention_at(64, 1024).forward == 0.1);
  CHECK(cpu.calibration->vector == default_calibration().vector);
  CHECK_THAT(error("[calibration]\nname = \"x\"\n"), Catch::Contains("unknown key [calibration] name"));
  CHECK(cpu.calibration->attention_at(64, 1024).backward == 0.1);  // one direction stands for both
  CHECK_THAT(error("[machine]\nbase = \"h100\"\n[calibration]\ngemm = 1.5\n"),
             Catch::Contains("[calibration] gemm must be a fraction in (0, 1]"));
  CHECK_THAT(error("[machine]\nbase = \"h100\"\n[gpu]\ntflops = 1e300\n"), Catch::Contains("out of range"));
  // a [calibration] without attention keeps the default's measured shapes
  const MachineProfile gemm_only = read_machine_profile(write("[machine]\nbase = \"h100\"\n[calibration]\ngemm = 0.5\n"));
  CHECK(gemm_only.calibration->attention.size() == default_calibration().attention.size());
  // a GPU's profile by its device name: the model as a whole word
  MachineProfile found;
  CHECK(machine_profile_for_gpu("NVIDIA H100 80GB HBM3", found));
  CHECK(found.name == "h100");
  CHECK(machine_profile_for_gpu("NVIDIA A100-SXM4-80GB", found));
  CHECK(found.name == "a100");
  CHECK(!machine_profile_for_gpu("NVIDIA L40S", found));  // not an L4
  CHECK(machine_profile_for_gpu("NVIDIA L4", found));
  CHECK(found.name == "l4");
  std::filesystem::remove_all(dir);
}

TEST_CASE("a machine file written as doctor writes it reads back as the same machine", "[plan][machine]") {
  const std::string path = "/tmp/ztrain_test_machine_out_" + std::to_string(::getpid()) + ".toml";
  MachineProfile m = machine_profile("a10");
  m.name = "measured \"lab\"\t1";  // quotes and a control character, escaped
  m.gpus_per_machine = 3;
  m.intra = {"inside, 3 ranks", 2.84e9, 5.3e-6, 0.115e9, 4.87e9};
  m.network = {"across 2 machines", 0.0232e9, 35e-6, 0.0121e9, 0.024e9};
  Calibration c = default_calibration();
  c.gemm = 0.9;
  c.memory = 0.8;
  c.vector = 0.7;
  c.attention.clear();
  m.calibration = c;
  for (const std::string base : {"", "a10"}) {
    std::ofstream(path) << machine_file_text(m, base, "line one\nline two");
    const MachineProfile back = read_machine_profile(path);
    CHECK(back.name == m.name);
    CHECK(back.gpus_per_machine == 3);
    CHECK(back.gpu.tflops == m.gpu.tflops);
    CHECK(back.gpu.bytes_per_s == Approx(m.gpu.bytes_per_s));
    for (const auto& [got, want] : {std::pair{back.intra, m.intra}, std::pair{back.network, m.network}}) {
      CHECK(got.name == want.name);
      CHECK(got.bytes_per_s == Approx(want.bytes_per_s));
      CHECK(got.step_latency_s == Approx(want.step_latency_s));
      CHECK(got.reduce_scatter_bytes_per_s == Approx(want.reduce_scatter_bytes_per_s));
      CHECK(got.all_gather_bytes_per_s == Approx(want.all_gather_bytes_per_s));
    }
    REQUIRE(back.calibration);
    CHECK(back.calibration->gemm == 0.9);
    CHECK(back.calibration->memory == 0.8);
    CHECK(back.calibration->vector == 0.7);
    CHECK(back.calibration->attention_at(64, 1024).forward == 0.9);  // none measured: as the GEMMs
  }
  std::filesystem::remove(path);
}

TEST_CASE("the default calibration is the H200 run's calibration file", "[plan][calibration]") {
  const Calibration file = read_calibration(std::string(ZT_SOURCE_DIR) + "/bench/calibration/h200.json");
  const Calibration d = default_calibration();
  CHECK(file.gemm == Approx(d.gemm).epsilon(1e-4));
  CHECK(file.memory == Approx(d.memory).epsilon(1e-4));
  REQUIRE(file.attention.size() == d.attention.size());
  for (size_t i = 0; i < d.attention.size(); ++i) {
    CHECK(file.attention[i].head_size == d.attention[i].head_size);
    CHECK(file.attention[i].seq_len == d.attention[i].seq_len);
    CHECK(file.attention[i].forward == Approx(d.attention[i].forward).epsilon(1e-3));
    CHECK(file.attention[i].backward == Approx(d.attention[i].backward).epsilon(1e-3));
  }
  // PyTorch's cuDNN attention measured in the same run: faster than ztrain's kernels at every shape
  const Calibration tuned =
      read_calibration(std::string(ZT_SOURCE_DIR) + "/bench/calibration/h200-pytorch-cudnn-attention.json");
  for (const auto& a : d.attention) CHECK(tuned.attention_at(a.head_size, a.seq_len).forward > a.forward);
  CHECK_THROWS_AS(read_calibration(std::string(ZT_SOURCE_DIR) + "/README.md"), UserError);
  CHECK(file.fp8_gemm == 0);  // no FP8 measured there: the planner takes the bf16 GEMMs' fraction
}

TEST_CASE("a calibration's FP8 linear layers give the FP8 GEMMs' fraction of the FP8 peak, casts taken out",
          "[plan][calibration][fp8]") {
  nlohmann::json j = nlohmann::json::parse(
      std::ifstream(std::string(ZT_SOURCE_DIR) + "/bench/calibration/h200.json"));
  // 8192 x 4096 -> 14336: 0.962 TFLOP; its casts move (8192 + 14336) x 4096 x 5 bytes = 0.461 GB,
  // 0.121 ms at the file's 3818 GB/s; a 1.0 ms forward leaves 0.879 ms: 1094 TFLOP/s, 0.553 of 1979
  j["fp8_linear"] = {{{"shape", "test"}, {"N", 8192}, {"C", 4096}, {"OC", 14336}, {"bf16_fwd_ms", 1.6},
                      {"fp8_fwd_ms", 1.0}, {"fwd_speedup", 1.6}, {"bwd_speedup", 1.5}}};
  const std::string path = std::filesystem::temp_directory_path() / ("zt_cal_fp8_" + std::to_string(getpid()) + ".json");
  std::ofstream(path) << j.dump();
  const Calibration c = read_calibration(path);
  const double casts_s = (8192.0 + 14336) * 4096 * 5 / 3818e9;
  CHECK(c.fp8_gemm == Approx(2.0 * 8192 * 4096 * 14336 / (1e-3 - casts_s) / 1979e12).epsilon(1e-6));
  CHECK(c.fp8_gemm == Approx(0.553).epsilon(0.01));
  // timed with the weight cast beforehand too: that time, only the input's cast taken out
  // (8192 x 4096 x 5 bytes = 0.168 GB, 0.044 ms): 0.9 ms leaves 0.856 ms
  j["fp8_linear"][0]["fp8_fwd_weight_copy_ms"] = 0.9;
  std::ofstream(path) << j.dump();
  const double x_cast_s = 8192.0 * 4096 * 5 / 3818e9;
  CHECK(read_calibration(path).fp8_gemm ==
        Approx(2.0 * 8192 * 4096 * 14336 / (0.9e-3 - x_cast_s) / 1979e12).epsilon(1e-6));
  j["fp8_linear"][0].erase("fp8_fwd_weight_copy_ms");
  // faster than the FP8 peak allows: refused
  j["fp8_linear"][0]["fp8_fwd_ms"] = 0.2;
  std::ofstream(path) << j.dump();
  CHECK_THROWS_WITH(read_calibration(path), Catch::Contains("fp8_linear"));
  std::filesystem::remove(path);
}

TEST_CASE("FP8 linear layers are priced on the FP8 peak with their casts, and refused where there is none",
          "[plan][fp8]") {
  const std::vector<std::string> fp8 = {"precision.compute=bf16", "precision.fp8=tensorwise", "precision.fp8_layers=all"};
  const RunSpec s8 = parse_run_spec(kPlanSpec, "plan.toml", fp8), s16 = parse_run_spec(kPlanSpec, "plan.toml",
                                                                                         {"precision.compute=bf16"});
  PlannedJob planned(s8, 1, DeviceKind::CUDA);
  planned.backend().reset_work();
  planned.step();
  double fp8_flops = 0, casts = 0;
  for (const PlanBackend::Op& op : planned.backend().ops()) {
    if (op.fp8) fp8_flops += op.flops;
    if (!op.matrix && std::string(op.name).find("_fp8") != std::string::npos) casts += op.bytes;
  }
  // the blocks' four linear layers (qkv 96, proj 32, fc 128, proj 32 outputs of 32 or 128 inputs)
  // over 2 blocks, 4 micro-batches of 32 rows: a forward and two backward products each
  const double per_row = 32.0 * 96 + 32.0 * 32 + 32.0 * 128 + 128.0 * 32;
  CHECK(fp8_flops == Approx(2 * 4 * 3 * 2 * 32 * per_row));
  CHECK(casts > 0);
  // The weights stay on the device (ZeRO stage 0): each is cast once per update into the copy every
  // product of the step takes (fp8_weight_copies.h), 8 casts for 2 blocks' 4 layers, not one in
  // each of the 4 micro-batches' forwards and input gradients. At ZeRO-3 with the FP8 gather each
  // rank casts its shard of each weight once per update (fp8_cast_with_amax) and the passes gather
  // those bytes, half the compute type's; without it (fp8_all_gather = false) each product casts
  // the weight it was gathered, and the casts move more bytes.
  auto weight_copies = [](PlannedJob& p) {
    int n = 0;
    for (const PlanBackend::Op& op : p.backend().ops()) n += std::string(op.name) == "fp8_weight_copy";
    return n;
  };
  auto cast_bytes = [](PlannedJob& p) {
    double b = 0;
    for (const PlanBackend::Op& op : p.backend().ops())
      if (!op.matrix && (std::string(op.name).find("_fp8") != std::string::npos ||
                         std::string(op.name) == "fp8_weight_copy"))
        b += op.bytes;
    return b;
  };
  CHECK(weight_copies(planned) == 8);
  planned.backend().reset_work();
  planned.step();  // the next step: the update renewed the parameters, so again once each
  CHECK(weight_copies(planned) == 8);
  std::vector<std::string> z1_sets = fp8;
  z1_sets.push_back("parallel.zero_stage=1");  // 2 ranks: the compute copy gathered after the update
  PlannedJob z1(parse_run_spec(kPlanSpec, "plan.toml", z1_sets), 2, DeviceKind::CUDA);
  z1.backend().reset_work();
  z1.step();
  CHECK(weight_copies(z1) == 8);
  auto count = [](PlannedJob& p, const std::string& name) {
    int n = 0;
    for (const PlanBackend::Op& op : p.backend().ops()) n += name == op.name;
    return n;
  };
  auto gathered_bytes = [](PlannedJob& p) {
    double b = 0;
    for (const auto& c : p.backend().collectives()) b += c.kind == CollectiveKind::AllGather ? c.bytes : 0;
    return b;
  };
  std::vector<std::string> z3_sets = fp8;
  z3_sets.push_back("parallel.zero_stage=3");
  PlannedJob z3(parse_run_spec(kPlanSpec, "plan.toml", z3_sets), 2, DeviceKind::CUDA);
  z3_sets.push_back("precision.fp8_all_gather=false");
  PlannedJob z3_bf16(parse_run_spec(kPlanSpec, "plan.toml", z3_sets), 2, DeviceKind::CUDA);
  for (PlannedJob* p : {&z3, &z3_bf16}) {
    p->backend().reset_work();
    p->step();
    CHECK(weight_copies(*p) == 0);
  }
  CHECK(count(z3, "fp8_cast_with_amax") == 8);  // a unit a weight: one cast of each shard
  CHECK(count(z3_bf16, "fp8_cast_with_amax") == 0);
  CHECK(cast_bytes(z3_bf16) > cast_bytes(z1));  // both on 2 ranks
  // each block's FP8 weights (per_row elements) travel as 1 byte instead of 2, in each gather of
  // the block: a forward and a backward per micro-batch (2 a rank)
  CHECK(gathered_bytes(z3_bf16) - gathered_bytes(z3) == Approx(2 * 2 * 2 * per_row));
  // the products on the FP8 peak: a faster FP8 peak prices the FP8 step faster, the bf16 one alike
  // (memory made fast enough that these tiny products are bound by their arithmetic)
  MachineProfile h100 = machine_profile("h100");
  h100.gpu.bytes_per_s = 1e18;
  MachineProfile faster = h100;
  faster.gpu.fp8_tflops *= 2;
  const LayoutPlan a = plan_layout(s8, 1, DeviceKind::CUDA, &h100), b = plan_layout(s8, 1, DeviceKind::CUDA, &faster);
  CHECK(b.time.compute_s < a.time.compute_s);
  CHECK(plan_layout(s16, 1, DeviceKind::CUDA, &faster).time.compute_s ==
        Approx(plan_layout(s16, 1, DeviceKind::CUDA, &h100).time.compute_s));
  // no FP8 tensor cores (A100), or the CPU without the reference mode: refused
  const MachineProfile a100 = machine_profile("a100");
  CHECK_THROWS_WITH(plan_layout(s8, 1, DeviceKind::CUDA, &a100), Catch::Contains("needs FP8 tensor cores"));
  CHECK_THROWS_WITH(PlannedJob(s8, 1, DeviceKind::CPU), Catch::Contains("fp8_reference = true"));
  // FP8 that would not run is refused, not ignored: no layer chosen (fp8_layers "auto" on layers of
  // 32), rows not in 16s, the CPU's reference asked for on a GPU
  auto refused = [&](std::vector<std::string> sets) {
    sets.insert(sets.end(), {"precision.compute=bf16", "precision.fp8=tensorwise"});
    try {
      PlannedJob(parse_run_spec(kPlanSpec, "plan.toml", sets), 1, DeviceKind::CUDA);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("not refused");
  };
  CHECK_THAT(refused({}), Catch::Contains("no linear layer of this model runs in FP8"));
  CHECK_THAT(refused({"precision.fp8_layers=all", "model.seq_len=15"}), Catch::Contains("in multiples of 16"));
  CHECK_THAT(refused({"precision.fp8_layers=all", "precision.fp8_reference=true"}),
             Catch::Contains("on a GPU fp8 runs on the FP8 tensor cores"));
}
