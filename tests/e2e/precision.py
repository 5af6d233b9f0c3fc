#!/usr/bin/python3
"""Mixed precision end to end on the CPU backend (which stores bf16/fp16 exactly as the GPU does:
round to nearest even, fp32 maths, fp32 masters):
- bf16 and fp16 (dynamic loss scaling) train the same model as fp32: after 40 steps the loss is
  within 2% of fp32's and has fallen as much;
- fp16 with an initial scale of 2^28 overflows: steps are skipped (metrics: skipped, skipped_steps,
  loss_scale falls), and training continues to within 6% of fp32's loss after as many updates;
- fp16 overflowing at [precision] min_scale stops with exit 1 and a message that suggests bf16;
- bf16 under mpirun: ZeRO-1, -2 and -3 over 2 ranks (fp32 masters sharded, the compute copy
  gathered) and tensor parallelism 2 (its activations are reduced in fp32) give the single
  process's bf16 losses (relative difference <= 5e-3); fp16 ZeRO-2 likewise against bf16's
  single process with 2e-2 (another rounding);
- an unknown compute type exits 2 naming the key.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

failures = []


def expect(cond, msg):
    if not cond:
        failures.append(msg)


def train_records(out_dir):
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r["kind"] == "train"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ztrain", required=True)
    ap.add_argument("--tokenize", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 30000, 5)
        spec = os.path.join(work, "spec.toml")
        testlib.write_spec(spec, {
            "run": {"out_dir": os.path.join(work, "run"), "seed": 3, "device": "cpu", "threads": 2},
            "model": {"n_layer": 2, "n_head": 2, "d_model": 32, "vocab_size": 258, "seq_len": 32},
            "train": {"micro_batch": 4, "global_batch": 8, "max_steps": 40, "log_every": 1},
            "optim": {"lr": 3e-3, "warmup_steps": 5},
            "data": {"train": data},
        })

        def train(name, *sets, np_=1):
            out = os.path.join(work, name)
            argv = [args.ztrain, "train", spec, "--set", f"run.out_dir={out}"]
            for s in sets:
                argv += ["--set", s]
            if np_ == 1:
                p = testlib.run(argv, check=False)
            else:
                env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
                p = testlib.run(["mpirun", "--oversubscribe", "-np", str(np_), *argv], check=False, env=env,
                                timeout=300)
            if p.returncode != 0:
                failures.append(f"{name}: exit {p.returncode}: {p.stderr[-1500:]}")
                return None, p
            return train_records(out), p

        fp32, _ = train("fp32", "precision.compute=fp32")
        if fp32 is None:
            return testlib.report(failures, "")
        l0, l_end = fp32[0]["loss"], fp32[-1]["loss"]
        print(f"fp32: loss {l0:.4f} -> {l_end:.4f}")
        for compute in ("bf16", "fp16"):
            recs, p = train(compute, f"precision.compute={compute}")
            if recs is None:
                continue
            end = recs[-1]["loss"]
            rel = abs(end - l_end) / l_end
            print(f"{compute}: loss {recs[0]['loss']:.4f} -> {end:.4f} (rel diff to fp32 {rel:.2e})")
            expect(rel <= 0.02, f"{compute}: final loss {end:.4f} vs fp32 {l_end:.4f}")
            expect(f"precision: {compute} compute" in p.stderr, f"{compute}: no precision line in the log")
            if compute == "fp16":
                expect(all("loss_scale" in r and "skipped_steps" in r for r in recs), "fp16: no loss_scale in metrics")
                expect(recs[-1]["loss_scale"] == 65536, f"fp16: scale {recs[-1]['loss_scale']} (expected 65536)")

        # overflow: scale 2^28 makes this model's fp16 gradients infinite (they overflow above
        # about 2^22) until the scale has halved enough; the skipped steps are lost updates, so
        # the loss is compared with fp32's after as many applied updates
        recs, p = train("fp16_overflow", "precision.compute=fp16", "precision.initial_scale=268435456")
        if recs is not None:
            skipped = recs[-1]["skipped_steps"]
            end = recs[-1]["loss"]
            same_updates = fp32[len(fp32) - 1 - skipped]["loss"]
            print(f"fp16 from scale 2^28: {skipped} steps skipped, scale now {recs[-1]['loss_scale']:g}, "
                  f"loss {end:.4f} (fp32 after as many updates {same_updates:.4f})")
            expect(skipped >= 1 and any(r["skipped"] for r in recs), "fp16 overflow: no step was skipped")
            expect(recs[-1]["loss_scale"] < 2 ** 28, "fp16 overflow: the scale did not fall")
            expect(all(r["grad_norm"] is None for r in recs if r["skipped"]), "skipped steps report a grad_norm")
            expect("overflow (step skipped)" in p.stdout, "fp16 overflow: not shown on the progress line")
            # (the learning-rate schedule advanced during the skipped steps: 6%, measured 3.5%; an
            # unscaling bug would leave the loss near its initial 5.5 or diverge)
            expect(abs(end - same_updates) / same_updates <= 0.06,
                   f"fp16 overflow: final loss {end:.4f} vs fp32 {same_updates:.4f}")

        # overflow at the minimum scale: the run cannot be done in fp16
        _, p = train("fp16_floor", "precision.compute=fp16", "precision.initial_scale=1099511627776",
                     "precision.min_scale=1099511627776")
        failures[:] = [f for f in failures if not f.startswith("fp16_floor:")]
        expect(p.returncode == 1 and "min_scale" in p.stderr and "bf16" in p.stderr,
               f"fp16 overflow at min_scale: exit {p.returncode}, {p.stderr[-400:]}")

        # bad input
        _, p = train("bad", "precision.compute=fp8")
        failures[:] = [f for f in failures if not f.startswith("bad:")]
        expect(p.returncode == 2 and "[precision] compute" in p.stderr, f"compute=fp8: exit {p.returncode}, {p.stderr}")

        # bf16 across ranks
        if shutil.which("mpirun"):
            bf16, _ = train("bf16_single", "precision.compute=bf16", "train.max_steps=10")
            for name, sets, np_ in (("bf16_zero1_D2", ["parallel.zero_stage=1"], 2),
                                    ("bf16_zero2_D2", ["parallel.zero_stage=2"], 2),
                                    ("bf16_zero3_D2", ["parallel.zero_stage=3"], 2),
                                    ("bf16_tp2", ["parallel.tensor=2"], 2),
                                    ("fp16_zero2_D2", ["parallel.zero_stage=2", "precision.compute=fp16"], 2)):
                recs, _ = train(name, "precision.compute=bf16", "train.max_steps=10", *sets, np_=np_)
                if recs is None or bf16 is None:
                    continue
                worst = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(recs, bf16))
                tol = 2e-2 if name.startswith("fp16") else 5e-3
                print(f"{name}: worst loss rel diff to the single bf16 process {worst:.1e}")
                expect(len(recs) == len(bf16) and worst <= tol, f"{name}: losses differ by {worst:.2e}")
        elif not failures:  # the single-process part passed; the multi-rank part is a visible skip
            print("SKIP: mpirun not found (Debian: openmpi-bin); multi-rank bf16/fp16 not run")
            return testlib.SKIP
    return testlib.report(failures, "bf16 and fp16 train like fp32; fp16 loss scaling skips overflowing steps")


if __name__ == "__main__":
    sys.exit(main())
