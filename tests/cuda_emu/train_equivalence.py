#!/usr/bin/python3
"""Training on the emulated CUDA device equals the CPU backend (fp32 compute, tolerances below):
- `ztrain debug dump-state` (first batch's loss and every gradient, then 5 AdamW steps) on both
  backends, for GPT-2 and Llama with a padded vocabulary (260 -> 384), under recompute none /
  selective / full, ZeRO stages 0, 2 and 3 at world size 1 (stage 1 shards a subset of what 2
  does), optimizer offload to CPU memory and parameter offload (whose pinned uploads run on the
  copy stream); the loss and the 5 step losses agree within 1e-4 relative, each gradient within 1e-4 of its tensor's norm (float reassociation:
  cuBLASLt's and OpenBLAS's summation orders differ), the final parameters within 1e-3;
- a checkpoint saved on the emulated device resumes on the CPU backend, and one saved on the CPU
  resumes on the emulated device: 3 + 3 steps equal 6 steps of the saving backend's run within
  the same loss tolerance;
- the GEMMs are chosen by measurement among the heuristic's candidates, and [run] deterministic
  pins cuBLASLt's first heuristic (the log says which), training alike;
- a model the CUDA kernels cannot run (head size 256) exits 2 at start-up naming the op and why,
  as `ztrain plan --gpu` does; the CPU backend runs it.

usage: train_equivalence.py --ztrain ZTRAIN --tokenize TOKENIZE --plugin LIBZTRAIN_CUDA_EMU
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

h5py, np = testlib.require("h5py", "numpy")
failures, expect = testlib.checks(echo=True)
LOSS_TOL, GRAD_TOL, PARAM_TOL = 1e-4, 1e-4, 1e-3
GPT2 = {"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 128, "vocab_size": 260, "seq_len": 32}
LLAMA = {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 32, "d_ff": 96, "vocab_size": 260,
         "seq_len": 32}
CASES = [  # name, model, --set overrides
    ("gpt2_recompute_none", GPT2, ["train.recompute=none"]),
    ("gpt2_recompute_selective", GPT2, ["train.recompute=selective"]),
    ("gpt2_recompute_full", GPT2, ["train.recompute=full"]),
    ("llama_recompute_selective", LLAMA, ["train.recompute=selective"]),
    ("gpt2_zero2", GPT2, ["parallel.zero_stage=2"]),
    ("gpt2_zero3", GPT2, ["parallel.zero_stage=3"]),
    ("gpt2_zero2_offload_optimizer_cpu", GPT2, ["parallel.zero_stage=2", "offload.optimizer=cpu"]),
    ("gpt2_zero3_offload_params_cpu", GPT2, ["parallel.zero_stage=3", "offload.optimizer=cpu", "offload.params=cpu"]),
    ("llama_zero3_offload_params_cpu", LLAMA, ["parallel.zero_stage=3", "offload.optimizer=cpu",
                                               "offload.params=cpu"]),
]


rel = testlib.rel


def main():
    ap = testlib.arg_parser()
    ap.add_argument("--plugin", required=True)
    args = ap.parse_args()
    emu_env = dict(os.environ, ZTRAIN_CUDA_PLUGIN=args.plugin)
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 5)

        def spec_for(name, model, device):
            out = os.path.join(work, f"{name}_{device}")
            return testlib.tiny_spec(out + ".toml", out, data, model,
                                     {"micro_batch": 2, "global_batch": 4, "max_steps": 6, "log_every": 1},
                                     optim={"lr": 3e-3, "warmup_steps": 1}, seed=3, threads=2, device=device,
                                     precision__compute="fp32")

        def dump(name, model, sets, device):
            h5 = os.path.join(work, f"{name}_{device}.h5")
            p = testlib.dump_state(args.ztrain, spec_for(name, model, device), h5, 5, sets, env=emu_env, timeout=600)
            if p.returncode != 0:
                expect(False, f"{name} on {device}: dump-state exit {p.returncode}: {p.stderr[-1200:]}")
                return None
            return h5py.File(h5, "r")

        for name, model, sets in CASES:
            c, g = dump(name, model, sets, "cpu"), dump(name, model, sets, "cuda")
            if c is None or g is None:
                continue
            loss, steps, grads, finals = testlib.dump_differences(g, c)
            worst_g = max(grads, key=grads.get)
            worst_p = max(finals, key=finals.get)
            print(f"{name}: loss rel {loss:.1e}, step losses rel {steps:.1e}, worst gradient {grads[worst_g]:.1e} "
                  f"({worst_g}), worst final parameter {finals[worst_p]:.1e} ({worst_p})", flush=True)
            expect(loss <= LOSS_TOL and steps <= LOSS_TOL, f"{name}: losses differ ({loss:.2e}, {steps:.2e})")
            expect(grads[worst_g] <= GRAD_TOL, f"{name}: gradient {worst_g} differs by {grads[worst_g]:.2e}")
            expect(finals[worst_p] <= PARAM_TOL, f"{name}: parameter {worst_p} differs by {finals[worst_p]:.2e}")

        # checkpoints across backends: save at step 3 on one, resume on the other
        def train(name, device, sets=(), resume=None):
            out = os.path.join(work, name)
            argv = [args.ztrain, "train", spec_for("ckpt", GPT2, device), "--set", f"run.out_dir={out}",
                    "--set", f"checkpoint.dir={os.path.join(work, 'ckpt_' + name.split('_')[0])}"]
            for s in sets:
                argv += ["--set", s]
            if resume:
                argv += ["--resume", resume]
            p = testlib.run(argv, check=False, env=emu_env, timeout=600)
            expect(p.returncode == 0, f"{name} on {device}: exit {p.returncode}: {p.stderr[-1200:]}")
            return [r["loss"] for r in testlib.metrics(out, must_exist=False)], p

        runs = {}
        for saver, resumer in (("cuda", "cpu"), ("cpu", "cuda")):
            full, runs[saver] = train(f"{saver}full", saver)
            part, _ = train(f"{saver}part", saver, ["checkpoint.exit_after=3"])
            rest, p = train(f"{saver}part", resumer, resume="auto")
            resumed = "resumed from" in p.stderr
            d = rel(part + rest[-3:], full) if len(full) == 6 and len(part) >= 3 and len(rest) >= 3 else float("inf")
            print(f"checkpoint saved on {saver} at step 3, resumed on {resumer}: 6 losses rel {d:.1e} to the "
                  f"uninterrupted {saver} run (resume line: {resumed})", flush=True)
            expect(resumed and d <= LOSS_TOL, f"{saver} -> {resumer} resume: {full} vs {part} + {rest}")

        # the planner's step beside the measured one: on a GPU with a machine profile (the emulated
        # device calls itself an H200) rank 0 prints the prediction and each log line the ratio; the
        # CPU has no profile and shows none
        gpu_run, cpu_run = runs["cuda"], runs["cpu"]
        rows = testlib.metrics(os.path.join(work, "cudafull"), must_exist=False)
        print(f"prediction on the emulated device: {[l for l in gpu_run.stderr.splitlines() if 'predicted' in l][:1]}; "
              f"{[l.split('|')[-2] for l in gpu_run.stdout.splitlines() if '| plan ' in l][-1:]}", flush=True)
        expect("plan: a step predicted at" in gpu_run.stderr and "on the h200 profile" in gpu_run.stderr,
               f"no prediction on the emulated H200: {gpu_run.stderr[-800:]}")
        expect(sum("| plan " in l and "measured" in l for l in gpu_run.stdout.splitlines()) >= 4,
               f"the log lines do not show the prediction: {gpu_run.stdout[-800:]}")
        expect(rows and all(r.get("predicted_step_ms", 0) > 0 for r in rows), f"metrics rows lack predicted_step_ms: {rows[:2]}")
        expect("predicted" not in cpu_run.stderr and "| plan " not in cpu_run.stdout,
               f"the CPU run shows a prediction: {cpu_run.stdout[-400:]}")

        # the GEMMs: chosen by measurement among the heuristic's candidates (the emulated cuBLASLt
        # returns several), each logged once; [run] deterministic pins the first heuristic, and
        # both train alike
        tuned = runs["cuda"].stderr
        pinned_losses, p = train("cudapinned", "cuda", ["run.deterministic=true"])
        print(f"GEMM choices: {tuned.count('by measurement')} by measurement; under [run] deterministic "
              f"{p.stderr.count('the first heuristic ([run] deterministic)')} pinned, "
              f"{p.stderr.count('by measurement')} by measurement", flush=True)
        expect("of 4 by measurement" in tuned and "[run] deterministic" not in tuned,
               f"GEMMs not chosen by measurement: {tuned[-1200:]}")
        expect("the first heuristic ([run] deterministic)" in p.stderr and "by measurement" not in p.stderr,
               f"[run] deterministic did not pin the first heuristic: {p.stderr[-1200:]}")
        tuned_losses = [r["loss"] for r in testlib.metrics(os.path.join(work, "cudafull"), must_exist=False)]
        expect(len(pinned_losses) == 6 and rel(pinned_losses, tuned_losses) <= LOSS_TOL,
               f"pinned GEMMs train otherwise: {pinned_losses} vs {tuned_losses}")

        # a model the CUDA kernels cannot run (head size 256) is refused at start-up, before any
        # step, with the op and the reason; `ztrain plan` for a GPU says the same; the CPU runs it
        wide = dict(GPT2, n_head=1, d_model=256, d_ff=256)
        spec = spec_for("wide", wide, "cuda")
        p = testlib.run([args.ztrain, "train", spec, "--set", "train.max_steps=1"], check=False, env=emu_env, timeout=600)
        refusal = "attention_forward: head size 256 is above 128, the largest the CUDA attention kernels take"
        print(f"head size 256 on the emulated device: exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
        expect(p.returncode == 2 and refusal in p.stderr and "step 1" not in p.stdout,
               f"head size 256 on CUDA: exit {p.returncode}: {p.stdout[-300:]} {p.stderr[-600:]}")
        p = testlib.run([args.ztrain, "plan", spec, "--gpu", "h100"], check=False, timeout=120)
        expect(p.returncode == 2 and refusal in p.stderr, f"plan, head size 256 on a GPU: exit {p.returncode}: "
                                                          f"{p.stderr[-600:]}")
        p = testlib.run([args.ztrain, "train", spec, "--set", "run.device=cpu", "--set", "train.max_steps=1"],
                        check=False, timeout=600)
        expect(p.returncode == 0, f"head size 256 on the CPU: exit {p.returncode}: {p.stderr[-600:]}")
    return testlib.report(failures, "training on the emulated CUDA device equals the CPU backend: recompute, padded "
                                    "vocabulary, ZeRO 0/2/3, offload, checkpoints across backends")


if __name__ == "__main__":
    sys.exit(main())
