#!/usr/bin/python3
"""Packed documents against one document per padded row, on the same conversations: tokens with
loss per second, as a ratio (issue 47's speed figure, docs/measured.md).

800 generated chat conversations (1-2 exchanges; answers of a log-normal number of words, median
about 12, as chat data skews short with a long tail; about a third of a row on average) -> `ztrain-tokenize chat` (byte vocabulary,
ChatML, loss on the answers, conversations over seq_len + 1 tokens truncated) -> the same GPT-2
(4 layers, d_model 128, seq_len 512, micro-batches of 8, CPU backend) trained for the same steps
with [data] packing = "padded" and = "documents". Reported per mode: the rows' fill (from the
run's data line), steps/s, and tokens with loss per second (metrics.jsonl's loss_tokens_per_s,
mean over the steps after the first 3); then the ratio packed / padded, from runs in this script.

Usage: bench/packing_speed.py --ztrain build/bin/ztrain --tokenize build/bin/ztrain-tokenize [--steps 25]
"""
import json
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import testlib  # noqa: E402

T = 512
MODEL = {"n_layer": 4, "n_head": 4, "d_model": 128, "vocab_size": 260, "seq_len": T}
WORDS = "the of and to a in is that it for you was with on as have but be they".split() + \
        "king crown sword battle city citizen answer question reason".split()


def conversations(path, n, seed):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            msgs = []
            for _ in range(rng.choice((1, 1, 1, 2))):
                msgs.append({"role": "user", "content": " ".join(rng.choices(WORDS, k=rng.randint(3, 12)))})
                words = max(1, int(rng.lognormvariate(2.5, 0.9)))  # median e^2.5 = 12 words
                msgs.append({"role": "assistant", "content": " ".join(rng.choices(WORDS, k=words))})
            f.write(json.dumps({"messages": msgs}) + "\n")


def run(args, work, data, packing):
    spec = testlib.tiny_spec(os.path.join(work, packing + ".toml"), os.path.join(work, packing), data, MODEL,
                             {"micro_batch": 8, "global_batch": 8, "max_steps": args.steps, "log_every": 1},
                             optim={"lr": 1e-3, "warmup_steps": 2}, seed=1, threads=2, data__packing=packing)
    p = testlib.run([args.ztrain, "train", spec], check=False)
    if p.returncode != 0:
        sys.exit(f"{packing}: exit {p.returncode}: {p.stderr[-1500:]}")
    fill = re.search(r"([\d.]+)% of positions filled", p.stderr + p.stdout)
    rows = [r for r in testlib.metrics(os.path.join(work, packing)) if r["step"] > 3]
    loss_tps = sum(r["loss_tokens_per_s"] for r in rows) / len(rows)
    steps_s = 1e3 / (sum(r["step_ms"] for r in rows) / len(rows))
    docs = sum(r["documents"] for r in rows) / len(rows)
    return {"fill": float(fill.group(1)) if fill else float("nan"), "loss_tps": loss_tps, "steps_s": steps_s,
            "docs": docs}


def main():
    ap = testlib.arg_parser()
    ap.add_argument("--steps", type=int, default=25)
    args = ap.parse_args()
    with testlib.workdir("zt_packing_") as work:
        jsonl = os.path.join(work, "chat.jsonl")
        conversations(jsonl, 800, 5)
        data = os.path.join(work, "sft")
        p = testlib.run([args.tokenize, "chat", "--vocab", "byte", "--template", "chatml", "--out", data,
                         "--max-tokens", str(T + 1), "--overlong", "truncate", jsonl])
        print(p.stderr.strip())
        got = {m: run(args, work, data, m) for m in ("padded", "documents")}
    print(f"\nGPT-2 4 layers d_model 128, seq_len {T}, micro-batch 8, CPU backend, {args.steps} steps each")
    print(f"{'packing':<10} {'rows filled':>12} {'documents/step':>15} {'steps/s':>8} {'loss tokens/s':>14}")
    for m, r in got.items():
        print(f"{m:<10} {r['fill']:>11.1f}% {r['docs']:>15.1f} {r['steps_s']:>8.2f} {r['loss_tps']:>14.0f}")
    ratio = got["documents"]["loss_tps"] / got["padded"]["loss_tps"]
    print(f"packed / padded, tokens with loss per second: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
