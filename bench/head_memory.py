#!/usr/bin/python3
"""The output head and loss in chunks: what it saves, measured on the CPU backend in one run.
Trains 2 steps of a GPT-2 with the real vocabulary (50257) and a small body, twice:
- chunked: the head and loss a chunk of rows at a time (the default rule, docs/models.md);
- whole: ZTRAIN_HEAD_CHUNK_ROWS = B*T, one chunk of every row, so the (B*T, vocab) logits exist.
Prints both measured peaks (the trainer's `peak memory` line), the plan's peak for the chunked
run, the logits tensor's bytes, and the drop as a fraction of them; the losses must be equal.
Usage: bench/head_memory.py [--seq_len 1024 --micro_batch 8 --d_model 128]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import testlib  # noqa: E402

VOCAB = 50257


def train(ztrain, spec, rows=None):
    env = dict(os.environ)
    env.pop("ZTRAIN_HEAD_CHUNK_ROWS", None)
    if rows:
        env["ZTRAIN_HEAD_CHUNK_ROWS"] = str(rows)
    p = subprocess.run([ztrain, "train", spec], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"ztrain train failed ({p.returncode}):\n{p.stderr[-2000:]}")
    out = p.stdout + p.stderr
    peak = int(re.search(r"peak memory: .*\((\d+) bytes\)", out).group(1))
    return peak, re.findall(r"loss (\d+\.\d+)", out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--seq_len", type=int, default=1024)
    ap.add_argument("--micro_batch", type=int, default=8)
    ap.add_argument("--d_model", type=int, default=128)
    a = ap.parse_args()
    ztrain, tokenize = os.path.join(a.build, "ztrain"), os.path.join(a.build, "ztrain-tokenize")
    work = tempfile.mkdtemp(prefix="zt_bench_head_")
    try:
        data = testlib.make_byte_dataset(tokenize, os.path.join(work, "data"), 40000, 5)
        spec = os.path.join(work, "spec.toml")
        testlib.write_spec(spec, {
            "run": {"out_dir": os.path.join(work, "run"), "seed": 1, "device": "cpu", "threads": 2},
            "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "d_model": a.d_model, "vocab_size": VOCAB,
                      "seq_len": a.seq_len},
            "train": {"micro_batch": a.micro_batch, "global_batch": a.micro_batch, "max_steps": 2, "log_every": 1},
            "optim": {"lr": 1e-3},
            "data": {"train": data},
        })
        plan = subprocess.run([ztrain, "plan", spec], capture_output=True, text=True, check=True).stdout
        planned = int(re.search(r"peak device memory: .*\((\d+) bytes\)", plan).group(1))
        rows = a.micro_batch * a.seq_len
        chunked, loss_c = train(ztrain, spec)
        whole, loss_w = train(ztrain, spec, rows)
        logits = rows * VOCAB * 4  # fp32 on the CPU backend
        print(f"GPT-2, 2 layers, d_model {a.d_model}, vocab {VOCAB}, {rows} rows a step, fp32")
        print(f"peak, head in one chunk (the logits whole): {whole:>14,} bytes")
        print(f"peak, head in chunks (default):             {chunked:>14,} bytes (plan: {planned:,})")
        print(f"logits tensor:                              {logits:>14,} bytes")
        print(f"drop: {whole - chunked:,} bytes = {(whole - chunked) / logits:.3f}x the logits tensor; "
              f"losses {'equal' if loss_c == loss_w else f'DIFFER {loss_c} vs {loss_w}'}")
        return 0 if loss_c == loss_w and planned == chunked else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
