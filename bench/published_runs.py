#!/usr/bin/python3
"""The planner's step time against other engines' published, measured training runs
(bench/published_runs.json: model, GPUs, layout, batch, sequence length, tokens/s per GPU, with
their sources). Each row becomes a run spec and a `ztrain plan --world N --gpu PROFILE
--calibration FILE --json`; the predicted tokens/s per GPU must be within 35% of the published
figure. The calibration is a well-tuned engine's on the H200 (bench/calibration/
h200-pytorch-cudnn-attention.json: cuBLASLt GEMMs and PyTorch's cuDNN attention, measured there);
no efficiency is fitted to a row. Rows the planner cannot model (pipeline parallelism, FP8, a GPU
without a profile) are listed as skipped, with why.

A benchmark, not a CI test: the rows it prices and their ratios are in docs/measured.md, the
misses with them (exit 1 while any row is outside 35%).

Usage: bench/published_runs.py --ztrain build/bin/ztrain [--markdown] [--runs FILE] [--calibration FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

TOLERANCE = 0.35
PROFILES = [("H200", "h200"), ("H100", "h100"), ("A100", "a100"), ("A10", "a10"), ("L4", "l4")]


def profile_of(gpu):
    for key, name in PROFILES:  # longest names first where one contains another (A100, A10)
        if gpu and key in gpu.upper():
            return name
    return None


def why_not(row):
    """Why the planner cannot price this row as published, or None."""
    if (row.get("pipeline") or 1) > 1:
        return "pipeline parallelism (not in ztrain)"
    if "bf16" not in (row.get("precision") or "bf16"):
        return f"{row['precision']} (ztrain plans bf16)"
    if not profile_of(row.get("gpu")):
        return f"no machine profile for {row.get('gpu')}"
    if not row.get("tokens_per_s_per_gpu"):
        return "no tokens/s per GPU published"
    for k in ("n_layer", "d_model", "n_head", "vocab_size", "seq_len", "gpus"):
        if not row.get(k):
            return f"{k} not given"
    return None


def spec_of(row, path):
    llama = "llama" in row["model"].lower() or (row.get("n_kv_head") or row["n_head"]) != row["n_head"]
    gpus, tensor = row["gpus"], row.get("tensor") or 1
    data = gpus // tensor
    micro = row.get("micro_batch") or 1
    global_batch = row.get("global_batch") or micro * data
    sharding = (row.get("sharding") or "none").lower()
    zero = (3 if any(k in sharding for k in ("fsdp", "zero-3", "full_shard", "full shard")) else
            2 if "zero-2" in sharding else 1 if "zero-1" in sharding else 0)
    model = {"arch": "llama" if llama else "gpt2", "n_layer": row["n_layer"], "n_head": row["n_head"],
             "d_model": row["d_model"], "vocab_size": row["vocab_size"], "seq_len": row["seq_len"]}
    if row.get("d_ff"):
        model["d_ff"] = row["d_ff"]
    if llama:
        model["n_kv_head"] = row.get("n_kv_head") or row["n_head"]
        model["tie_embeddings"] = False
    testlib.write_spec(path, {
        "run": {"device": "cuda"},
        "model": model,
        "train": {"micro_batch": micro, "global_batch": global_batch,
                  "recompute": row.get("recompute") or "none"},
        "precision": {"compute": "bf16"},
        # torchtitan's tensor-parallel plan shards the norms with SequenceParallel
        "parallel": {"tensor": tensor, "zero_stage": zero, "sequence_parallel": bool(row.get("sequence_parallel"))},
        "data": {"train": "unused"},
    })


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ztrain", required=True)
    ap.add_argument("--runs", default=os.path.join(ROOT, "bench", "published_runs.json"))
    ap.add_argument("--calibration", default=os.path.join(ROOT, "bench", "calibration",
                                                          "h200-pytorch-cudnn-attention.json"))
    ap.add_argument("--markdown", action="store_true", help="print the table for docs/measured.md")
    a = ap.parse_args()
    with open(a.runs) as f:
        rows = json.load(f)["runs"]
    failures, expect = testlib.checks()
    table = []
    with tempfile.TemporaryDirectory(prefix="zt_published_") as work:
        for i, row in enumerate(rows):
            label = (f"{row['engine']}: {row['model']}, {row.get('gpus')} x {row.get('gpu')}, "
                     f"T{row.get('tensor') or 1} {row.get('sharding')}, seq {row.get('seq_len')}, "
                     f"micro-batch {row.get('micro_batch')}" + (", torch.compile" if row.get("compile") else ""))
            skip = why_not(row)
            if skip:
                table.append((label, row.get("tokens_per_s_per_gpu"), None, None, f"skipped: {skip}"))
                continue
            spec = os.path.join(work, f"row{i}.toml")
            spec_of(row, spec)
            # the time, not the memory, is checked: the engines' own memory use is theirs
            cmd = [a.ztrain, "plan", spec, "--world", str(row["gpus"]), "--gpu", profile_of(row["gpu"]),
                   "--calibration", a.calibration, "--device-memory", "100000GB", "--json"]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                expect(False, f"{label}: ztrain plan failed ({p.returncode}): {p.stderr.strip()[-300:]}")
                table.append((label, row["tokens_per_s_per_gpu"], None, None, "plan failed"))
                continue
            plan = json.loads(p.stdout)
            predicted = plan["tokens_per_s_per_gpu"]
            ratio = predicted / row["tokens_per_s_per_gpu"]
            expect(abs(ratio - 1) <= TOLERANCE,
                   f"{label}: predicted {predicted:.0f} tokens/s per GPU, published {row['tokens_per_s_per_gpu']}: "
                   f"ratio {ratio:.2f} (limit 1 +- {TOLERANCE})")
            stalls = "; ".join(f"{s['what']} {s['ms']:.0f} ms" for s in plan.get("stalls", [])[:1])
            table.append((label, row["tokens_per_s_per_gpu"], predicted, ratio,
                          f"MFU {100 * plan['predicted_mfu']:.1f}%" + (f"; waits: {stalls}" if stalls else "")))
    if a.markdown:
        print("| run (engine: model, GPUs, layout) | published tokens/s per GPU | predicted | ratio | notes |")
        print("|---|---|---|---|---|")
    for label, pub, pred, ratio, note in table:
        if a.markdown:
            print(f"| {label} | {pub} | {'' if pred is None else f'{pred:.0f}'} | "
                  f"{'' if ratio is None else f'{ratio:.2f}'} | {note} |")
        else:
            print(f"{label}: published {pub}, predicted {'-' if pred is None else f'{pred:.0f}'}, "
                  f"ratio {'-' if ratio is None else f'{ratio:.2f}'} ({note})")
    priced = [r for r in table if r[3] is not None]
    expect(len(priced) >= 8, f"only {len(priced)} published runs priced (at least 8)")
    return testlib.report(failures, f"{len(priced)} published runs predicted within {int(TOLERANCE * 100)}%")


if __name__ == "__main__":
    sys.exit(main())
