#!/usr/bin/python3
"""Low-rank adapters ([lora], issue 48) end to end on the CPU backend:
- memory: the model states per rank (params + grads + optimizer of the memory line) of a Llama
  whose adapters are under 1% of its parameters, LoRA against full fine-tuning of the same model:
  at least 3x smaller in fp32 (the frozen weights hold 4 bytes an element, not 16) and 6x in bf16
  (2, not 18); each figure also checked against the states' arithmetic;
- checkpoints hold the adapters only, and the base they were trained on (its origin and weights'
  fingerprint); a run resumed from step 3 gives the straight run's losses bit for bit, and resumed
  under another layout (2 ranks, ZeRO-3) within 1e-5;
- a resume on another base (another seed for the frozen weights) is refused with exit 2, naming
  both bases; so is a checkpoint of full fine-tuning into a LoRA run.
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

h5py, np = testlib.require("h5py", "numpy")
failures, expect = testlib.checks()
STATES = re.compile(r"rank 0 memory: params ([\d.]+) MiB, grads ([\d.]+) MiB, optimizer ([\d.]+) MiB")

# adapters on q and v of rank 2: 4 x 2 x 2 x (256 + 256) = 8192 of 3.4M parameters (0.24%)
MODEL = {"arch": "llama", "n_layer": 4, "n_head": 4, "n_kv_head": 2, "d_model": 256, "d_ff": 704,
         "vocab_size": 260, "seq_len": 32}
LORA = {"rank": 2, "alpha": 4.0, "targets": "q,v"}


def model_params(m):
    C, F, L, V = m["d_model"], m["d_ff"], m["n_layer"], 384  # the vocabulary padded to 128
    kv = C // m["n_head"] * m["n_kv_head"]
    return L * (2 * C * C + 2 * kv * C + 3 * F * C + 2 * C) + 2 * V * C + C


def main():
    args = testlib.arg_parser().parse_args()
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 7)

        def spec(name, lora=True, **over):
            return testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, name), data, MODEL,
                                     seed=5, train={"micro_batch": 2, "global_batch": 4, "max_steps": 6, "log_every": 1},
                                     optim={"lr": 1e-2, "warmup_steps": 1},
                                     **({f"lora__{k}": v for k, v in LORA.items()} if lora else {}), **over)

        def train(path, *extra, np_=1):
            argv = [args.ztrain, "train", path, *extra]
            if np_ == 1:
                return testlib.run(argv, check=False)
            return testlib.run([*testlib.mpirun(np_), *argv], check=False, env=testlib.mpi_env(), timeout=300)

        # ---- memory: model states, LoRA against full fine-tuning
        n = model_params(MODEL)
        for compute, per_full, per_lora, least in (("fp32", 16, 4, 3.0), ("bf16", 18, 2, 6.0)):
            got = {}
            for lora in (False, True):
                p = train(spec(f"mem_{compute}_{lora}", lora, precision__compute=compute), "--set", "train.max_steps=1")
                m = STATES.search(p.stderr)
                expect(p.returncode == 0 and m, f"{compute} lora={lora}: exit {p.returncode}: {p.stderr[-600:]}")
                if m:
                    got[lora] = sum(float(x) for x in m.groups()) * 2**20
            if len(got) < 2:
                continue
            ratio = got[False] / got[True]
            print(f"{compute}: model states per rank, full fine-tuning {got[False] / 2**20:.3f} MiB, LoRA "
                  f"{got[True] / 2**20:.3f} MiB: {ratio:.1f}x smaller (expected about {per_full / per_lora:.0f}x)")
            expect(ratio >= least, f"{compute}: LoRA's model states only {ratio:.2f}x smaller than full fine-tuning")
            # the arithmetic: per_full / per_lora bytes an element (the adapters' few and the padding aside)
            expect(abs(got[False] / (n * per_full) - 1) < 0.02,
                   f"{compute}: full fine-tuning's states {got[False]:.0f} B, not {per_full} B x {n} elements")
            expect(abs(got[True] / (n * per_lora) - 1) < 0.05,
                   f"{compute}: LoRA's states {got[True]:.0f} B, not about {per_lora} B x {n} elements")

        # ---- checkpoints: adapters only, the base recorded; exact resume, and on another layout
        straight = spec("straight")
        p = train(straight)
        expect(p.returncode == 0, f"straight run: exit {p.returncode}: {p.stderr[-600:]}")
        want = [r["loss"] for r in testlib.metrics(os.path.join(work, "straight"))]
        ckpt = os.path.join(work, "ckpt")
        first = spec("first", checkpoint__dir=ckpt, checkpoint__every_steps=3)
        p = train(first, "--set", "checkpoint.exit_after=3")
        expect(p.returncode == 0, f"first 3 steps: exit {p.returncode}: {p.stderr[-600:]}")
        path = os.path.join(ckpt, "step_00000003", "checkpoint.h5")
        if os.path.exists(path):
            with h5py.File(path, "r") as f:
                names = list(f["params"].keys())
                expect(names and all(".lora_" in k for k in names), f"checkpoint holds {names[:4]}...: not adapters only")
                base = f["meta"]["lora_base"][()].decode()
                print(f"checkpoint: {len(names)} adapter tensors; base {base!r}, fingerprint "
                      f"{f['meta']['lora_base_fingerprint'][()].decode()}")
                expect(base == "seed 5", f"checkpoint's base is {base!r}, not the seed's")
        for name, np_, extra in (("same layout", 1, ()), ("2 ranks, ZeRO-3", 2, ("--set", "parallel.zero_stage=3"))):
            out = os.path.join(work, "resumed_" + str(np_))
            p = train(first, "--set", f"checkpoint.resume={os.path.dirname(path)}", "--set", f"run.out_dir={out}", *extra,
                      np_=np_)
            expect(p.returncode == 0, f"resume ({name}): exit {p.returncode}: {p.stderr[-800:]}")
            got = [r["loss"] for r in testlib.metrics(out)]
            tol = 0 if np_ == 1 else 1e-5
            worst = max((abs(a - b) / abs(b) for a, b in zip(got, want[3:])), default=float("inf"))
            print(f"resumed at step 3 ({name}): losses {got} vs straight {want[3:]}: worst rel diff {worst:.1e}")
            expect(len(got) == 3 and worst <= tol, f"resume ({name}): losses {got} differ from {want[3:]}")

        # ---- refusals: another base; a full fine-tuning checkpoint into a LoRA run
        p = train(first, "--set", f"checkpoint.resume={os.path.dirname(path)}", "--set", "run.seed=6",
                  "--set", f"run.out_dir={os.path.join(work, 'other_base')}")
        print(f"resume on another base: exit {p.returncode}: {p.stderr.strip().splitlines()[-1] if p.stderr else ''}")
        expect(p.returncode == 2 and "trained on the base weights of seed 5" in p.stderr and "seed 6" in p.stderr,
               f"a resume on another base: exit {p.returncode}: {p.stderr[-600:]}")
        full_ckpt = os.path.join(work, "full_ckpt")
        p = train(spec("full", False, checkpoint__dir=full_ckpt), "--set", "train.max_steps=1")
        expect(p.returncode == 0, f"full fine-tuning run: exit {p.returncode}: {p.stderr[-600:]}")
        p = train(first, "--set", f"checkpoint.init_from={full_ckpt}",
                  "--set", f"run.out_dir={os.path.join(work, 'from_full')}")
        print(f"a full fine-tuning checkpoint into a LoRA run: exit {p.returncode}")
        expect(p.returncode == 2 and "does not fit [model] and [lora]" in p.stderr,
               f"a full fine-tuning checkpoint into a LoRA run: exit {p.returncode}: {p.stderr[-600:]}")
    return testlib.report(failures, "LoRA: model states 3x+ smaller; adapters-only checkpoints resume exactly, on "
                                    "another layout too; another base is refused")


if __name__ == "__main__":
    sys.exit(main())
