#!/usr/bin/python3
"""FP8 weight copies kept between parameter updates (issue 50; engine/model/fp8_weight_copies.h),
on the CPU backend's FP8 reference ([precision] fp8_reference): at ZeRO stages 0-2 each FP8 layer's
weight is cast once per update into a copy every product of the step takes; at ZeRO-3 each rank
casts its shards of the FP8 weights once per update with the whole weight's scale and the passes
gather those bytes (the FP8 gather, engine/parallel/param_store.h), or with fp8_all_gather = false
each product casts the weight it was gathered. Each must give the copy of the weights as they are
now, so every run trains exactly as one that casts in every product:
- a tiny GPT-2, every block linear layer in FP8, 4 micro-batches of 2 sequences a step (2 a rank
  on 2 ranks: the copies serve every micro-batch's forward and input gradients), evaluated every 2
  steps (an evaluation after an update must not use the copies of the weights before it),
  checkpointed every 3 steps, 6 tokens sampled at the end (forwards of 1 x 1..6 rows: not in 16s,
  so the FP8 layers run in the compute type and ZeRO-3 gathers their weights in it):
  - one process (stage 0, copies kept), 2 ranks at ZeRO-1 (copies kept), 2 ranks at ZeRO-3 with
    the FP8 gather (its log says all 4 weights a block travel as FP8) and without it: the same
    train and eval losses, bit for bit, and the same sample;
  - resumed from step 3 at ZeRO-1 (copies made from the loaded weights) and at ZeRO-3 (FP8 shards
    cast from the loaded weights): steps 4-6 as the run that went on;
  - 4 ranks at ZeRO-3 in 2 replicas (hybrid sharding: the amax agreed inside a replica): the same
    losses as one process; tensor 2 x data 2 at ZeRO-3 (each tensor rank's shards of its own
    slices) as at ZeRO-1 (a rank's slice has its own scale under tensor parallelism, so the
    reference is ZeRO-1 on the same layout);
- a tiny Qwen2 (Llama's packed q|k|v and gate|up weights, with the q, k, v biases between them):
  one process and 2 ranks at ZeRO-3 with the FP8 gather (8 of 8 weights), the same losses.
The bugs this guards against, each planted once: a copy kept past an update (the store's parameter
version not renewed in ParamStore::publish_params) gives different losses from the second step on;
FP8 shards cast each with its own scale (the amax all-reduce left out of
ParamStore::cast_fp8_shards) differ from the first step.
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

STEPS = 6


def main():
    with testlib.mpi_test("zt_fp8_copies_", 20000, 5) as (args, failures, expect, work, data):
        val = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "val"), 3000, 6)
        spec = testlib.tiny_spec(
            os.path.join(work, "spec.toml"), os.path.join(work, "run"), data, seed=11, threads=1,
            model={"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 128, "vocab_size": 260, "seq_len": 16},
            train={"micro_batch": 2, "global_batch": 8, "max_steps": STEPS, "log_every": 1, "eval_every": 2,
                   "eval_steps": 2},
            optim={"lr": 3e-3, "warmup_steps": 2}, train__sample_tokens=6,
            precision__compute="bf16", precision__fp8="tensorwise", precision__fp8_layers="all",
            precision__fp8_reference=True, data__val=val)

        def train(name, ranks, sets=(), resume=None, run_spec=spec):
            out = os.path.join(work, name)
            sets = [f"run.out_dir={out}", f"checkpoint.dir={out}/ckpt", "checkpoint.every_steps=3", *sets]
            p = testlib.run(testlib.train_cmd(args.ztrain, run_spec, sets, ranks, resume), check=False,
                            env=testlib.mpi_env(), timeout=600, errors="replace")
            if p.returncode != 0:
                expect(False, f"{name}: exit {p.returncode}: {p.stderr[-1500:]}")
                return None
            runs = {kind: [(r["step"], r[key]) for r in testlib.metrics(out, kind)] for kind, key in (("train", "loss"), ("eval", "val_loss"))}
            log = p.stdout + p.stderr
            expect("FP8 linear layers" in log, f"{name}: the log names no FP8 linear layer")
            gathered = re.search(r"FP8 gather: (\d+) of the (\d+) FP8 weights", log)
            runs["gathered"] = (int(gathered.group(1)), int(gathered.group(2))) if gathered else None
            sample = re.search(r"---- sample.*?----\n(.*?)\n---- end of sample", p.stdout, re.S)
            expect(resume or sample, f"{name}: no sample in the output")
            runs["sample"] = sample.group(1) if sample else None
            return runs

        one = train("one", 1)
        z1 = train("zero1", 2, ["parallel.zero_stage=1"])
        z3 = train("zero3", 2, ["parallel.zero_stage=3"])
        z3_bf16 = train("zero3_gather_bf16", 2, ["parallel.zero_stage=3", "precision.fp8_all_gather=false"])
        if z3:
            expect(z3["gathered"] == (8, 8), f"ZeRO-3 gathers 8 of 8 FP8 weights as FP8 bytes: {z3['gathered']}")
        if z3_bf16:
            expect(z3_bf16["gathered"] == (0, 8), f"fp8_all_gather = false gathers none as FP8: {z3_bf16['gathered']}")
        if one and z1 and z3 and z3_bf16:
            expect(len(one["train"]) == STEPS and len(one["eval"]) >= STEPS // 2,
                   f"one process: {len(one['train'])} train and {len(one['eval'])} eval records")
            for name, got in (("ZeRO-1 (copies kept)", z1), ("ZeRO-3 (FP8 gather)", z3),
                              ("ZeRO-3 (cast in each product)", z3_bf16)):
                for kind in ("train", "eval", "sample"):
                    expect(got[kind] == one[kind], f"{name} {kind} = one process's: {got[kind]} vs {one[kind]}")
        for name, run, sets in (("zero1", z1, ["parallel.zero_stage=1"]), ("zero3", z3, ["parallel.zero_stage=3"])):
            if not run:
                continue
            ckpt = os.path.join(work, name, "ckpt")
            step3 = sorted(d for d in os.listdir(ckpt) if d.endswith("_00000003") and os.path.isdir(os.path.join(ckpt, d)))
            expect(bool(step3), f"no step-3 checkpoint in {ckpt}: {os.listdir(ckpt)}")
            if step3:
                resumed = train(f"resumed_{name}", 2, sets, resume=os.path.join(ckpt, step3[0]))
                if resumed:
                    tail = [r for r in run["train"] if r[0] > 3]
                    expect(resumed["train"] == tail, f"{name} resumed steps 4-{STEPS} = the run that went on: "
                           f"{resumed['train']} vs {tail}")
        rep = train("replicas", 4, ["parallel.zero_stage=3", "parallel.replicate=2"])
        if one and rep:
            expect(rep["gathered"] == (8, 8) and rep["train"] == one["train"] and rep["eval"] == one["eval"],
                   f"ZeRO-3 in 2 replicas ({rep['gathered']} gathered as FP8) = one process: {rep['train']} vs "
                   f"{one['train']}")
        t2z1 = train("tensor2_zero1", 4, ["parallel.zero_stage=1", "parallel.tensor=2"])
        t2z3 = train("tensor2_zero3", 4, ["parallel.zero_stage=3", "parallel.tensor=2"])
        if t2z1 and t2z3:
            expect(t2z3["gathered"] == (8, 8) and t2z3["train"] == t2z1["train"] and t2z3["sample"] == t2z1["sample"],
                   f"tensor 2 ZeRO-3 ({t2z3['gathered']} gathered as FP8) = tensor 2 ZeRO-1: {t2z3['train']} vs "
                   f"{t2z1['train']}")
        # Llama-shaped: the FP8 weights are runs of tensors (q|k|v, gate|up)
        qwen = testlib.tiny_spec(
            os.path.join(work, "qwen.toml"), os.path.join(work, "run"), data, seed=12, threads=1,
            model={"arch": "qwen2", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 32, "d_ff": 64,
                   "vocab_size": 260, "seq_len": 16},
            train={"micro_batch": 2, "global_batch": 8, "max_steps": 3, "log_every": 1},
            optim={"lr": 3e-3, "warmup_steps": 1}, train__sample_tokens=4,
            precision__compute="bf16", precision__fp8="tensorwise", precision__fp8_layers="all",
            precision__fp8_reference=True)
        q1 = train("qwen_one", 1, run_spec=qwen)
        q3 = train("qwen_zero3", 2, ["parallel.zero_stage=3"], run_spec=qwen)
        if q3:
            expect(q3["gathered"] == (8, 8), f"qwen2 ZeRO-3 gathers 8 of 8 FP8 weights as FP8: {q3['gathered']}")
        if q1 and q3:
            expect(len(q1["train"]) == 3 and q3["train"] == q1["train"] and q3["sample"] == q1["sample"],
                   f"qwen2 ZeRO-3 (FP8 gather) = one process: {q3['train']} vs {q1['train']}")
    return testlib.report(failures, "FP8 weight copies: the same losses as a cast in every product")


if __name__ == "__main__":
    sys.exit(main())
