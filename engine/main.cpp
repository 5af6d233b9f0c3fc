// ztrain command line: `ztrain <command> SPEC.toml [--set section.key=value ...]`.
// Only this file turns errors into exit codes: 0 ok, 1 runtime failure, 2 bad input.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <cstring>
#include <string>
#include <vector>

#include <filesystem>

#include "engine/checkpoint/checkpoint_files.h"
#include "engine/comm/agreement.h"
#include "engine/comm/flight_recorder.h"
#include "engine/checkpoint/checkpoint_reader.h"
#include "engine/hf/spec_loading.h"
#include "engine/core/faults.h"
#include <nlohmann/json.hpp>

#include "engine/core/byte_size.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/core/user_path.h"
#include "engine/hf/hf_weights.h"
#include "engine/hf/lora_export.h"
#include "engine/comm/topology.h"
#include "engine/plan/plan_command.h"
#include "engine/plan/memory_check.h"
#include "engine/train/doctor.h"
#include "engine/observe/report.h"
#include "engine/train/dump_state.h"
#include "engine/train/supervise.h"
#include "engine/train/trainer.h"

using namespace zt;

namespace {

const char* kUsage = R"(usage: ztrain <command> SPEC.toml [--set section.key=value ...]

commands:
  train SPEC.toml               train the model the spec describes
        [--resume auto|PATH]    continue from the newest complete checkpoint in [checkpoint] dir,
                                or from PATH (the same as --set checkpoint.resume=...)
        [--resume-unchecked]    resume even when the resume check fails (the probe batch's loss
                                differs from the saved one; for debugging)
  supervise [--max-restarts N] [--backoff S] [--max-backoff S] -- COMMAND...
                                run COMMAND (mpirun ... ztrain train SPEC.toml) and rerun it from
                                its latest checkpoint after a runtime failure (not after exit 2),
                                waiting S seconds (default 10, doubling up to 600); at most N reruns
                                (default 3); exits with the last attempt's status
  check SPEC.toml               validate the spec and print it fully resolved (defaults filled in)
  plan SPEC.toml                what each rank needs: memory by kind and tier, the peak; with --gpu,
        [--world N] [--gpu h100|h200|a100|a10|l4|h100-tcp | --machine FILE.toml] [--device-memory 80GB]
        [--calibration FILE.json] [--search] [--compare h100,a100,FILE.toml...] [--json]
                                the step's time on that machine, communication included; --search
                                lists the layouts that fit, fastest first; --compare gives each
                                machine's fastest layout, tokens/s, MFU, cost and bottleneck
  debug dump-state SPEC.toml --out FILE.h5 [--steps N]
                                write initial parameters, first batch, loss and gradients (and,
                                with --steps, N training steps) to HDF5 for parity tests
  doctor [SPEC.toml] [--write-machine FILE.toml]
                                checks this machine before a job: GPUs, driver, NCCL, MPI, the
                                collectives' bandwidth inside and across machines (under mpirun),
                                memory, ulimits, and with a spec its data sources and directories;
                                PASS / WARN / FAIL with the fix (exit 1 on FAIL); --write-machine:
                                the measured machine profile, for ztrain plan --machine
  report RUN_DIR [--out F.png]  a PNG dashboard of a run (loss, tokens/s and MFU, the step breakdown,
                                memory over time) from its metrics.jsonl, drawn by gnuplot
  export CHECKPOINT --format hf --out DIR [--dtype fp32|bf16|fp16] [--max-file-size 5GB]
                                write a checkpoint's weights as Hugging Face safetensors (split
                                above the size, with model.safetensors.index.json) and config.json;
                                --dtype defaults to bf16, which rounds the fp32 masters (fp32: exact)
  export CHECKPOINT --format peft --out DIR [--dtype fp32|bf16|fp16]
                                a LoRA checkpoint's adapters as PEFT writes them
                                (adapter_model.safetensors, adapter_config.json); --dtype: fp32
  export CHECKPOINT --format hf --merge-lora --out DIR [--base DIR] [--dtype ...]
                                a LoRA checkpoint's base with its adapters merged (W + alpha/r B A),
                                as a plain Hugging Face model; the base is the one it was trained on
                                ([model] init_from, or the seed's), or --base DIR
  ckpt ls DIR                   the checkpoints in DIR: step, complete or not, layout, size
  ckpt verify PATH              check every block's checksum of checkpoint PATH (exit 2 if damaged)
  help spec                     every run-spec key with its type, default and meaning (Markdown)

options:
  --set section.key=value       override a spec value (repeatable), e.g. --set optim.lr=3e-4
  --verbose                     debug logging
  --help                        this text

exit status: 0 ok, 1 runtime failure, 2 bad input (spec, CLI, data)

before training starts (every check exits 2 with one message):
  - under mpirun, every rank's command line and spec are checked; an error on any rank ends the job,
    printed once with its rank, and ranks given different specs are named with the first key that
    differs and both values
  - the memory the spec needs per rank (model states as ZeRO shards them, activations) is compared
    with what the machine or GPU has available
  - passwords in URLs (http://user:pass@host/...) are shown and written as user:***@host
  - a run without [checkpoint] dir that is interrupted (SIGINT, SIGTERM) says at which step
)";

struct Cli {
  std::string command, spec_path, out;
  std::string write_machine;  // doctor
  std::vector<std::string> overrides;
  int steps = 0;
  bool verbose = false, help = false;
  bool resume_unchecked = false;  // train
  PlanOptions plan;
  std::string format, dtype, max_file_size = "5GB", base;  // export (dtype "": the format's default)
  bool merge_lora = false;
};

Cli parse_cli(int argc, char** argv) {
  Cli c;
  int i = 1;
  if (i < argc && (std::string(argv[i]) == "debug" || std::string(argv[i]) == "ckpt")) {
    if (i + 1 >= argc)
      user_error("{} needs a subcommand ({})", argv[i], std::string(argv[i]) == "debug" ? "dump-state" : "ls, verify");
    c.command = std::string(argv[i]) + " " + argv[i + 1];
    i += 2;
  } else if (i < argc) {
    c.command = argv[i++];
  }
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) user_error("{} needs a value", a);
      return argv[++i];
    };
    if (a == "--help" || a == "-h") c.help = true;
    else if (a == "--verbose") c.verbose = true;
    else if (a == "--set") c.overrides.push_back(value());
    else if (a.rfind("--set=", 0) == 0) c.overrides.push_back(a.substr(6));
    else if (a == "--out") c.out = value();
    else if (a == "--resume") c.overrides.push_back("checkpoint.resume=" + value());
    else if (a == "--resume-unchecked") c.resume_unchecked = true;
    else if (a == "--steps") c.steps = int(parse_count(value(), "--steps", 0, 999999));
    else if (a == "--world") c.plan.world = int(parse_count(value(), "--world", 1, 1 << 20));
    else if (a == "--gpu") c.plan.gpu = value();
    else if (a == "--machine") c.plan.machine = value();
    else if (a == "--write-machine") c.write_machine = value();
    else if (a == "--calibration") c.plan.calibration = value();
    else if (a == "--compare")  // names or files, comma-separated or repeated
      for (std::string v = value(), item; !v.empty();) {
        const size_t comma = v.find(',');
        item = v.substr(0, comma);
        v = comma == std::string::npos ? "" : v.substr(comma + 1);
        if (!item.empty()) c.plan.compare.push_back(item);
      }
    else if (a == "--device-memory") c.plan.device_memory = value();
    else if (a == "--search") c.plan.search = true;
    else if (a == "--json") c.plan.json = true;
    else if (a == "--format") c.format = value();
    else if (a == "--dtype") c.dtype = value();
    else if (a == "--max-file-size") c.max_file_size = value();
    else if (a == "--merge-lora") c.merge_lora = true;
    else if (a == "--base") c.base = value();
    else if (a.size() > 1 && a[0] == '-') user_error("unknown option {} (see ztrain --help)", a);
    else if (c.spec_path.empty()) c.spec_path = a;
    else user_error("unexpected argument '{}' (one SPEC.toml per command)", a);
  }
  return c;
}

int ckpt_ls(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) user_error("{}: not a directory", dir);
  const std::string latest = read_latest(dir);
  const auto all = list_checkpoints(dir);
  std::printf("%-10s %-22s %-30s %10s  %s\n", "step", "state", "layout (ranks, T, D, ZeRO)", "MiB", "path");
  for (const auto& c : all) {
    std::string layout = "-", state = c.complete ? "complete" : fmt::format("incomplete (job {})", c.job_id);
    if (c.complete) {
      try {
        const TrainState s = read_train_state(c.path);
        layout = fmt::format("{} ranks, T={} D={} ZeRO-{}", s.world, s.tensor, s.data_parallel, s.zero_stage);
      } catch (const std::exception& e) {
        state = "damaged";
      }
      if (c.name == latest) state += ", latest";
    }
    std::printf("%-10lld %-22s %-30s %10.1f  %s\n", (long long)c.step, state.c_str(), layout.c_str(),
                c.bytes / 1048576.0, c.path.c_str());
  }
  if (all.empty()) std::printf("(no checkpoints in %s)\n", dir.c_str());
  return 0;
}

int ckpt_verify(const std::string& given) {
  const std::string path = resolve_local_checkpoint(given);  // what --resume accepts
  const std::string problem = verify_checkpoint(path);
  if (!problem.empty()) user_error("{}", problem);
  const TrainState s = read_train_state(path);
  std::printf("%s: ok (step %lld; every block's checksum matches; written by %lld ranks)\n", path.c_str(),
              (long long)s.step, (long long)s.world);
  return 0;
}

int export_command(const Cli& c) {
  if (c.spec_path.empty()) user_error("export: missing CHECKPOINT (a step_* directory, its checkpoint.h5, or a checkpoint dir)");
  if (c.format != "hf" && c.format != "peft")
    user_error("export: --format hf or peft is required (Hugging Face safetensors; PEFT's adapter directory)");
  if (c.merge_lora && c.format != "hf") user_error("export: --merge-lora goes with --format hf");
  if (!c.base.empty() && !c.merge_lora) user_error("export: --base names the base of --merge-lora");
  if (c.out.empty()) user_error("export: --out DIR is required");
  check_dir_arg(c.out, "export: --out", /*create=*/false);
  // the paths --resume and ckpt verify take: a step directory, its checkpoint.h5, or the root
  const std::string ckpt = resolve_local_checkpoint(c.spec_path);
  DType dt;
  const std::string dtype = !c.dtype.empty() ? c.dtype : c.format == "peft" ? "fp32" : "bf16";
  if (dtype == "fp32") dt = DType::F32;
  else if (dtype == "bf16") dt = DType::BF16;
  else if (dtype == "fp16") dt = DType::F16;
  else user_error("export: --dtype {}: expected fp32, bf16 or fp16", dtype);
  const uint64_t max_bytes = parse_byte_size(c.max_file_size, "--max-file-size");
  if (max_bytes == 0) user_error("export: --max-file-size must be above 0");
  const std::string problem = verify_checkpoint(ckpt);
  if (!problem.empty()) user_error("export: {}", problem);
  const std::string done = c.format == "peft" ? export_peft(ckpt, c.out, dt)
                           : c.merge_lora     ? export_merged(ckpt, c.out, dt, max_bytes, c.base)
                                              : export_hf(ckpt, c.out, dt, max_bytes);
  std::printf("%s\n", done.c_str());
  return 0;
}

bool needs_spec(const std::string& command) {
  return command == "train" || command == "check" || command == "plan" || command == "debug dump-state";
}

int run(int argc, char** argv) {
  // Start-up: the command line and the spec. Under mpirun each rank reads its own (a wrapper may
  // give ranks different arguments), so the ranks agree on the outcome and on the spec before
  // anything else: an error on any rank ends every rank with exit 2 and one message.
  Cli c;
  RunSpec spec;
  std::exception_ptr error;
  try {
    c = parse_cli(argc, argv);
    log_init(c.verbose);
    if (!c.help && needs_spec(c.command)) {
      if (c.spec_path.empty()) user_error("{}: missing SPEC.toml", c.command);
      spec = load_run_spec(c.spec_path, c.overrides);
    }
    if (!c.help && c.command == "doctor" && !c.spec_path.empty()) spec = load_run_spec(c.spec_path, c.overrides);
  } catch (...) {
    error = std::current_exception();
  }
  if (dist_active()) {
    const auto world = make_world_comm(spec.comm.timeout_s);
    agree_on_failure(*world, error);
    if (needs_spec(c.command) && !c.help) agree_on_spec(*world, resolved_entries(spec));
  } else if (error) {
    std::rethrow_exception(error);
  }
  if (c.command == "help" && c.spec_path == "spec") {
    std::fputs(spec_reference_markdown().c_str(), stdout);
    return 0;
  }
  if (c.help || c.command.empty() || c.command == "help" || c.command == "--help" || c.command == "-h") {
    std::fputs(kUsage, stdout);
    return c.command.empty() && !c.help ? 2 : 0;
  }
  if (c.command == "doctor") return run_doctor(c.spec_path.empty() ? nullptr : &spec, c.write_machine);
  if (c.command == "report") {
    if (c.spec_path.empty()) user_error("report: missing RUN_DIR");
    std::optional<RunSpec> resolved;
    try {
      resolved = load_run_spec((std::filesystem::path(c.spec_path) / "config.resolved.toml").string());
    } catch (const UserError&) {  // the report draws what metrics.jsonl has
    }
    std::printf("%s\n", write_report(c.spec_path, c.out, resolved ? &*resolved : nullptr).c_str());
    return 0;
  }
  if (c.command == "ckpt ls" || c.command == "ckpt verify") {
    if (c.spec_path.empty()) user_error("{}: missing {}", c.command, c.command == "ckpt ls" ? "DIR" : "PATH");
    return c.command == "ckpt ls" ? ckpt_ls(c.spec_path) : ckpt_verify(c.spec_path);
  }
  if (c.command == "export") return export_command(c);
  if (!needs_spec(c.command)) user_error("unknown command '{}' (see ztrain --help)", c.command);
  // [comm] NCCL settings apply to this run only: exported before any communicator exists.
  if (!spec.comm.nccl_algo.empty()) setenv("NCCL_ALGO", spec.comm.nccl_algo.c_str(), 1);
  if (!spec.comm.nccl_proto.empty()) setenv("NCCL_PROTO", spec.comm.nccl_proto.c_str(), 1);
  if (spec.run.deterministic) {  // NCCL's reduction order follows its algorithm and protocol: pin them
    if (spec.comm.nccl_algo.empty()) setenv("NCCL_ALGO", "Ring", 1);
    if (spec.comm.nccl_proto.empty()) setenv("NCCL_PROTO", "Simple", 1);
  }
  if (c.command == "plan") return plan_command(c.plan, spec);
  if (c.command == "check") {
    if (dist_world_rank() == 0) std::fputs(resolved_toml(spec).c_str(), stdout);
    return 0;
  }
  if (c.command == "train") {
    install_usr2_handler();  // docs promise the run goes on: SIGUSR2's default action ends it
    spec.checkpoint.resume_unchecked = c.resume_unchecked;
    Trainer trainer(spec);
    trainer.run();
    return 0;
  }
  if (c.out.empty()) user_error("debug dump-state: --out FILE.h5 is required");
  check_output_file(c.out, "debug dump-state: --out");  // before anything is built: bad input, not a late failure
  dump_state(spec, c.out, c.steps);
  return 0;
}

}  // namespace

// In a multi-rank job an error on one rank must end every rank (the others would wait in a
// collective). Start-up errors (command line, spec, building the run) are agreed on by all ranks
// (run above, Trainer) and printed there, once; errors every rank finds alike after that (the
// process layout) are printed by rank 0 only; any later failure aborts the whole job with its
// exit code.
int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "supervise") {  // mpirun's parent: no MPI here
    try {
      return supervise_main(std::vector<std::string>(argv + 2, argv + argc));
    } catch (const UserError& e) {
      std::fprintf(stderr, "ztrain: error: %s\n", e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ztrain: failure: %s\n", e.what());
      return 1;
    }
  }
  faults();  // the test-only fault hooks are read from the environment once, before anything runs
  dist_init(&argc, &argv, [&] {  // [comm] timeout_s of the spec, when the command line names one that loads
    try {
      const Cli c = parse_cli(argc, argv);
      if (!c.spec_path.empty()) return load_run_spec(c.spec_path, c.overrides).comm.timeout_s;
    } catch (...) {  // the real start-up reports it
    }
    return RunSpec{}.comm.timeout_s;
  });
  int code = 0;
  bool agreed = false;  // every rank ends with this error on its own: no abort
  try {
    code = run(argc, argv);
  } catch (const PeerFailure& e) {
    dist_finalize();  // the failing rank reported it, and every rank agreed to stop
    return e.code;
  } catch (...) {
    const std::exception_ptr error = std::current_exception();
    code = exit_code_of(error);
    agreed = is_agreed_failure(error);
    const bool alike_everywhere = code == 2 && dist_phase() == DistPhase::Setup;
    if (!alike_everywhere || dist_world_rank() == 0)
      print_error(error, dist_active() && !alike_everywhere ? dist_world_rank() : -1);
  }
  if (code != 0 && dist_active() && dist_phase() == DistPhase::Running && !agreed) {
    std::fflush(stderr);
    dist_abort(code);
  }
  dist_finalize();
  return code;
}
