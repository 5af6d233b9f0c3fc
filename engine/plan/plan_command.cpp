// ztrain plan (see plan_command.h).
#include "engine/plan/plan_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/backend/backend.h"
#include "engine/core/byte_size.h"
#include "engine/core/status.h"
#include "engine/plan/calibration_file.h"
#include "engine/plan/layout_plan.h"
#include "engine/plan/machine_file.h"
#include "engine/plan/memory_check.h"
#include "engine/job/job.h"
#include "engine/model/registry.h"

namespace zt {

namespace {

std::string gib(double bytes) { return fmt::format("{:.3f} GiB", bytes / 1073741824.0); }

// 596.0M, 8.03B
std::string count(double n) { return n >= 1e9 ? fmt::format("{:.2f}B", n / 1e9) : fmt::format("{:.1f}M", n / 1e6); }

// The model's size by its family's formula (the real vocabulary's rows, not the padding), and the
// training FLOPs a token that MFU is judged by; with [lora], what trains.
std::string model_line(const RunSpec& spec) {
  RunSpec::Model m = spec.model;
  m.vocab_multiple = 1;
  const double params = model_footprint(m, 1, 1, 2, Recompute::None).params;
  const double lora = model_family(m.arch).lora_params(m, spec.lora);
  std::string line = fmt::format("model: {}, {} parameters; {:.2f} GFLOP a token in training ({} x {} in matrix "
                                 "products{}, and attention)", m.arch, count(params),
                                 model_flops_per_token(m, spec.lora) / 1e9, lora > 0 ? 4 : 6,
                                 count(model_family(m.arch).matmul_params(m)),
                                 lora > 0 ? fmt::format(", 6 x {} in the adapters'", count(lora)) : "");
  if (lora > 0)
    line += fmt::format("\nlora: rank {} on {} of every block: {} adapter parameters train ({:.2f}% of the model); "
                        "the model's weights are frozen (compute precision only)", spec.lora.rank, spec.lora.targets,
                        count(lora), 100 * lora / params);
  return line;
}

nlohmann::json plan_json(const LayoutPlan& p, double device_memory) {
  nlohmann::json kinds;
  for (int t = 0; t < int(MemTag::kCount); ++t) kinds[mem_tag_name(MemTag(t))] = p.memory.peak_by_tag[t];
  nlohmann::json j = {{"world", p.world}, {"tensor", p.tensor}, {"data", p.data}, {"zero_stage", p.zero_stage},
                      {"replicate", p.replicate}, {"sequence_parallel", p.sequence_parallel},
                      {"micro_batch", p.micro_batch}, {"compute", dtype_name(p.compute)},
                      {"per_rank_bytes", {{"device", kinds}, {"host", {{"pinned", p.memory.pinned_host}}}, {"nvme", p.nvme_bytes}}},
                      {"peak_device_bytes", p.peak_device()},
                      {"fits", device_memory <= 0 || double(p.peak_device()) <= device_memory},
                      {"step_flops_rank0", p.work.matrix_flops + p.work.other_flops}, {"step_bytes_rank0", p.work.bytes}};
  if (p.time.step_s > 0) {
    j["predicted_step_ms"] = p.time.step_s * 1e3;
    j["compute_ms"] = p.time.compute_s * 1e3;
    for (const auto& [name, k] : {std::pair<const char*, const StepTime::Kind&>{"gemm", p.time.gemm},
                                  {"attention", p.time.attention}, {"other", p.time.other}})
      j["compute_by_kind"][name] = {{"ms", k.seconds * 1e3}, {"flops", k.flops}, {"bytes", k.bytes}};
    j["communication_by_group"] = nlohmann::json::object();
    for (const auto& [group, g] : p.time.groups) {
      nlohmann::json kinds = nlohmann::json::object();
      for (const auto& [kind, seconds] : g.kind_seconds) kinds[kind] = seconds * 1e3;
      j["communication_by_group"][group] = {{"ms", g.seconds * 1e3}, {"exposed_ms", g.stalled * 1e3}, {"ms_by_kind", kinds}};
    }
    j["communication_ms"] = p.time.comm_s * 1e3;
    j["exposed_communication_ms"] = p.time.exposed_s() * 1e3;
    nlohmann::json stalls = nlohmann::json::array();
    for (const auto& s : p.time.stalls) stalls.push_back({{"what", s.what}, {"ms", s.seconds * 1e3}});
    j["stalls"] = stalls;
    j["roofline_step_ms"] = p.roofline_s * 1e3;
    j["tokens_per_s_per_gpu"] = p.tokens_per_s_per_gpu();
    j["predicted_mfu"] = p.mfu;
  }
  return j;
}

// What one rank may use: --device-memory, else the spec's [run] device_memory_limit, else the
// machine's GPU, else (CPU) this machine's available memory shared by the ranks; 0 = unknown.
// `where` names it for messages.
double memory_per_rank(const PlanOptions& c, const RunSpec& spec, const MachineProfile* machine, DeviceKind kind,
                       std::string& where) {
  if (!c.device_memory.empty()) return where = "--device-memory", double(parse_byte_size(c.device_memory, "--device-memory"));
  if (!spec.run.device_memory_limit.empty())  // the limit the run itself would be held to
    return where = "[run] device_memory_limit",
           double(parse_byte_size(spec.run.device_memory_limit, "[run] device_memory_limit"));
  if (machine) return where = machine->gpu.name, machine->gpu.memory_bytes;
  where = "this machine";
  return kind == DeviceKind::CPU ? double(make_cpu_backend(1)->memory_available()) / c.world : 0;
}

// train's first check: a spec whose footprint alone cannot fit is not planned (UserError). With
// --search, the smallest layouts: one sample a micro-batch, ZeRO-3, data- or tensor-parallel.
void check_footprint(const PlanOptions& c, const RunSpec& spec, DeviceKind kind, double memory, const std::string& where) {
  if (memory <= 0) return;
  MemoryBudget budget;
  budget.device = size_t(memory);
  budget.where = where;
  const DType compute = compute_dtype_of(spec.precision.compute, kind);
  if (!c.search) return check_footprint_fits(spec, c.world, compute, budget);
  RunSpec s = spec;
  s.train.micro_batch = 1, s.parallel.zero_stage = 3, s.parallel.tensor = 1, s.parallel.replicate = 1;
  try {
    check_footprint_fits(s, c.world, compute, budget);
  } catch (const UserError&) {
    if (c.world == 1 || spec.model.n_head % c.world || spec.model.d_ff % c.world) throw;
    s.parallel.tensor = c.world;
    check_footprint_fits(s, c.world, compute, budget);
  }
}

// Hybrid sharding's replica counts worth a plan: 1, and on a machine profile those whose replicas
// are whole machines (a replica's S x tensor ranks a multiple of the GPUs a machine), so that
// ZeRO's gathers stay inside machines and only the replicas' all-reduce crosses the network.
std::vector<int> replicas_to_search(int dp, int tensor, int zero_stage, const MachineProfile* machine) {
  std::vector<int> out{1};
  if (zero_stage == 0 || !machine) return out;
  for (int r = 2; r <= dp; ++r)
    if (dp % r == 0 && (dp / r) * tensor % std::max(1, machine->gpus_per_machine) == 0) out.push_back(r);
  return out;
}

// The spec's own layout, or with --search every layout of its model on c.world ranks (tensor x
// ZeRO stage x replicas x micro-batch, with tensor >= 2 sequence parallelism off and on) that fits
// `memory`, fastest first on a machine (else smallest first).
std::vector<LayoutPlan> plans_of(const PlanOptions& c, const RunSpec& spec, DeviceKind kind, const MachineProfile* machine,
                                 const Calibration* cal, double memory) {
  std::vector<LayoutPlan> plans;
  if (!c.search) return {plan_layout(spec, c.world, kind, machine, cal)};
  for (int t = 1; t <= c.world; ++t) {
    if (c.world % t || spec.model.n_head % t || spec.model.d_ff % t) continue;
    const int dp = c.world / t;
    for (int z = 0; z <= 3; ++z)
      for (const int r : replicas_to_search(dp, t, z, machine))
        for (const bool sp : t > 1 && spec.model.d_model % 2 == 0 ? std::vector<bool>{false, true} : std::vector<bool>{false})
          for (int64_t b = 1; b <= spec.train.global_batch / dp; b *= 2) {
            if ((spec.train.global_batch / dp) % b) continue;
            RunSpec s = spec;
            s.parallel.tensor = t, s.parallel.zero_stage = z, s.parallel.replicate = r, s.train.micro_batch = b;
            s.parallel.sequence_parallel = sp;
            if (b * s.model.seq_len > (int64_t(1) << 31) - 1) continue;
            plans.push_back(plan_layout(s, c.world, kind, machine, cal));
          }
  }
  std::erase_if(plans, [&](const LayoutPlan& p) { return memory > 0 && double(p.peak_device()) > memory; });
  std::sort(plans.begin(), plans.end(), [&](const LayoutPlan& a, const LayoutPlan& b) {
    if (machine && a.time.step_s != b.time.step_s) return a.time.step_s < b.time.step_s;
    return a.peak_device() < b.peak_device();
  });
  return plans;
}

MachineProfile profile_named(const std::string& name) {
  return name.size() > 5 && name.substr(name.size() - 5) == ".toml" ? read_machine_profile(name) : machine_profile(name);
}

// Cost per billion tokens of `p` on machines of `m`, 0 without a price.
double cost_per_billion(const LayoutPlan& p, const MachineProfile& m) {
  if (m.price_per_hour <= 0 || p.tokens_per_s_per_gpu() <= 0) return 0;
  const double machines = std::ceil(double(p.world) / m.gpus_per_machine);
  return machines * m.price_per_hour / 3600 * 1e9 / (p.tokens_per_s_per_gpu() * p.world);
}

// What bounds the step, in words.
std::string bottleneck(const LayoutPlan& p) {
  if (p.time.stalls.empty() || p.time.step_s <= 0 || p.time.exposed_s() < 0.05 * p.time.step_s) return "compute";
  return fmt::format("communication: {:.0f}% of the step waits, most for {}", 100 * p.time.exposed_s() / p.time.step_s,
                     p.time.stalls[0].what);
}

// --compare: the fastest layout that fits on each machine profile.
int compare(const PlanOptions& c, const RunSpec& spec, const Calibration* cal) {
  PlanOptions o = c;
  o.search = true;
  nlohmann::json out = nlohmann::json::array();
  if (!c.json)
    std::printf("compare: %s on %d GPUs; calibration: %s\n\n%-12s %-48s %12s %7s %10s %14s  %s\n", spec.source.c_str(),
                c.world, cal ? cal->source.c_str() : (default_calibration().source + ", or a machine file's own").c_str(),
                "machine", "fastest layout that fits", "tokens/s/GPU", "MFU", "step", "per 1e9 tokens", "bottleneck");
  for (const std::string& name : c.compare) {
    const MachineProfile m = profile_named(name);
    std::string where;
    const double memory = memory_per_rank(o, spec, &m, DeviceKind::CUDA, where);
    std::vector<LayoutPlan> plans;
    std::string why;
    try {
      check_footprint(o, spec, DeviceKind::CUDA, memory, where);
      plans = plans_of(o, spec, DeviceKind::CUDA, &m, cal, memory);
      if (plans.empty()) why = "no layout fits";
    } catch (const UserError& e) {
      why = e.what();
    }
    if (plans.empty()) {
      if (c.json) out.push_back({{"machine", m.name}, {"fits", false}, {"why", why}});
      else std::printf("%-12s does not fit: %s\n", m.name.c_str(), why.c_str());
      continue;
    }
    const LayoutPlan& p = plans[0];
    const double cost = cost_per_billion(p, m);
    if (c.json) {
      nlohmann::json j = plan_json(p, memory);
      j["machine"] = m.name, j["bottleneck"] = bottleneck(p);
      if (cost > 0) j["cost_per_billion_tokens"] = cost;
      out.push_back(j);
      continue;
    }
    const std::string layout = fmt::format("{}, micro {}", p.layout(), p.micro_batch);
    std::printf("%-12s %-48s %12.0f %6.1f%% %8.0f ms %14s  %s\n", m.name.c_str(), layout.c_str(),
                p.tokens_per_s_per_gpu(), 100 * p.mfu, p.time.step_s * 1e3,
                cost > 0 ? fmt::format("{:.2f}", cost).c_str() : "(no price)", bottleneck(p).c_str());
  }
  if (c.json) std::printf("%s\n", out.dump(1).c_str());
  return 0;
}

}  // namespace

int plan_command(const PlanOptions& c, const RunSpec& spec) {
  std::optional<Calibration> given;  // --calibration; else the machine's own, else the default
  if (!c.calibration.empty()) given = read_calibration(c.calibration);
  const Calibration* cal = given ? &*given : nullptr;
  if (!c.compare.empty()) {
    if (!c.gpu.empty() || !c.machine.empty()) user_error("plan: --compare names the machines: drop --gpu and --machine");
    return compare(c, spec, cal);
  }
  std::optional<MachineProfile> machine;
  if (!c.gpu.empty() && !c.machine.empty()) user_error("plan: --gpu and --machine both name the machine: give one");
  if (!c.gpu.empty()) machine = machine_profile(c.gpu);
  if (!c.machine.empty()) machine = read_machine_profile(c.machine);
  if (!c.calibration.empty() && !machine) user_error("plan: --calibration prices a step on a machine: give --gpu or --machine");
  const MachineProfile* on = machine ? &*machine : nullptr;
  const DeviceSpec* dev = machine ? &machine->gpu : nullptr;
  // a machine profile plans a GPU job unless the spec says the CPU (a CPU's own machine file)
  const DeviceKind kind = spec.run.device == DeviceChoice::Cpu                  ? DeviceKind::CPU
                          : dev || spec.run.device == DeviceChoice::Cuda ? DeviceKind::CUDA
                                                                          : DeviceKind::CPU;
  std::string where;
  const double memory = memory_per_rank(c, spec, on, kind, where);
  check_footprint(c, spec, kind, memory, where);
  auto describe = [&](const LayoutPlan& p) {
    nlohmann::json j = plan_json(p, memory);
    if (machine) j["machine"] = machine->name, j["device"] = dev->name;
    return j;
  };
  const std::vector<LayoutPlan> plans = plans_of(c, spec, kind, on, cal, memory);
  const Calibration calibration = cal ? *cal : on && on->calibration ? *on->calibration : default_calibration();
  if (c.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& p : plans) out.push_back(describe(p));
    std::printf("%s\n", (c.search ? out : out[0]).dump(1).c_str());
    return 0;
  }
  std::printf("plan: %s on %d ranks; %s available per rank%s\n", spec.source.c_str(), c.world,
              memory > 0 ? gib(memory).c_str() : "unknown",
              machine ? fmt::format("\nmachine {}: {}; {} x {} ({:g} TFLOP/s bf16, {:g} TB/s); inside a machine {} "
                                    "({:g} GB/s), across machines {} ({:g} GB/s a GPU); calibration: {}",
                                    machine->name, machine->source, machine->gpus_per_machine, dev->name, dev->tflops,
                                    dev->bytes_per_s / 1e12, machine->intra.name, machine->intra.bytes_per_s / 1e9,
                                    machine->network.name, machine->network.bytes_per_s / 1e9,
                                    calibration.source).c_str()
                      : "");
  if (machine && spec.precision.fp8 != Fp8Recipe::None)
    std::printf("FP8 linear layers on %g TFLOP/s FP8 tensor cores at %.1f%% of it (%s); MFU stays against the bf16 peak "
                "(torchtitan's convention)\n", dev->fp8_tflops, 100 * (calibration.fp8_gemm > 0 ? calibration.fp8_gemm : calibration.gemm),
                calibration.fp8_gemm > 0 ? "measured" : "not measured: the bf16 GEMMs' fraction");
  std::printf("%s\n", model_line(spec).c_str());
  if (plans.empty()) std::printf("no layout fits\n");
  for (const auto& p : plans) {
    const nlohmann::json j = describe(p);
    std::printf("\n%s, micro_batch %d, %s:\n", p.layout().c_str(), p.micro_batch, dtype_name(p.compute));
    std::string kinds;
    for (int t = 0; t < int(MemTag::kCount); ++t)
      if (p.memory.peak_by_tag[t]) kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", mem_tag_name(MemTag(t)), gib(double(p.memory.peak_by_tag[t])));
    std::printf("  device, per rank (each kind at its peak): %s\n", kinds.c_str());
    std::printf("  peak device memory: %s (%zu bytes)%s\n", gib(double(p.peak_device())).c_str(), p.peak_device(),
                memory > 0 ? (double(p.peak_device()) <= memory ? " - fits" : " - does NOT fit") : "");
    std::printf("  host (pinned): %s; NVMe: %s\n", gib(double(p.memory.pinned_host)).c_str(),
                p.nvme_bytes > 0 ? gib(p.nvme_bytes).c_str() : "none");
    if (p.time.step_s > 0) {
      std::printf("  predicted step: %.1f ms (compute %.1f ms, communication %.1f ms of which %.1f ms exposed); "
                  "%.0f tokens/s per GPU, MFU %.1f%%\n", p.time.step_s * 1e3, p.time.compute_s * 1e3,
                  p.time.comm_s * 1e3, p.time.exposed_s() * 1e3, p.tokens_per_s_per_gpu(), 100 * p.mfu);
      std::printf("    compute: GEMMs %.1f ms, attention %.1f ms, other ops %.1f ms (%.2f GB through memory)\n",
                  p.time.gemm.seconds * 1e3, p.time.attention.seconds * 1e3, p.time.other.seconds * 1e3,
                  p.time.other.bytes / 1e9);
      if (const double cost = cost_per_billion(p, *machine); cost > 0)  // the machines the job holds
        std::printf("    %g machine(s) at %g an hour: %.2f per billion tokens\n",
                    std::ceil(double(p.world) / machine->gpus_per_machine), machine->price_per_hour, cost);
      for (size_t i = 0; i < p.time.stalls.size() && i < 3; ++i)
        std::printf("    waits %.1f ms for %s\n", p.time.stalls[i].seconds * 1e3, p.time.stalls[i].what.c_str());
    }
    if (c.search && &p - plans.data() >= 9) break;
  }
  if (spec.lora.enabled() && !c.search && !plans.empty()) {  // what the adapters save: the same layout trained whole
    RunSpec whole = spec;
    whole.lora = RunSpec::Lora{};
    const LayoutPlan f = plan_layout(whole, c.world, kind, on, cal);
    const auto states = [](const LayoutPlan& p) {
      return double(p.memory.peak_by_tag[int(MemTag::Params)] + p.memory.peak_by_tag[int(MemTag::Grads)] +
                    p.memory.peak_by_tag[int(MemTag::OptimStates)]);
    };
    std::printf("\nwithout [lora] (every weight trained, the same layout): model states %s (LoRA: %s), peak device "
                "memory %s%s%s\n", gib(states(f)).c_str(), gib(states(plans[0])).c_str(), gib(double(f.peak_device())).c_str(),
                memory > 0 ? (double(f.peak_device()) <= memory ? " - fits" : " - does NOT fit") : "",
                f.time.step_s > 0 ? fmt::format("; predicted step {:.1f} ms", f.time.step_s * 1e3).c_str() : "");
  }
  return 0;
}


}  // namespace zt
