#!/usr/bin/python3
"""CPU training throughput: ztrain vs PyTorch on the same GPT-2, batch and thread count (fp32).

Both train the same model (same init, same batches of byte-level tokens, AdamW, clipping) and the
median step time after warm-up is compared; prints tokens/s for each and the ratio ztrain/PyTorch.
Usage: bench/cpu_train_vs_pytorch.py [--threads 2] [--steps 8] [--vocab 50304] ...
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import testlib  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8, help="timed steps (after 2 warm-up steps)")
    ap.add_argument("--n_layer", type=int, default=4)
    ap.add_argument("--d_model", type=int, default=256)
    ap.add_argument("--n_head", type=int, default=4)
    ap.add_argument("--seq_len", type=int, default=256)
    ap.add_argument("--micro_batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=50304)
    a = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import h5py
    import torch
    from torch_gpt import GPT
    torch.set_num_threads(a.threads)
    warm = 2
    total = warm + a.steps
    ztrain, tokenize = os.path.join(a.build, "ztrain"), os.path.join(a.build, "ztrain-tokenize")
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(tokenize, os.path.join(work, "data"), 200000, 1)
        spec = os.path.join(work, "bench.toml")
        testlib.write_spec(spec, {
            "run": {"out_dir": os.path.join(work, "run"), "seed": 1, "device": "cpu", "threads": a.threads},
            "model": {"n_layer": a.n_layer, "n_head": a.n_head, "d_model": a.d_model,
                      "vocab_size": a.vocab, "seq_len": a.seq_len},
            "train": {"micro_batch": a.micro_batch, "global_batch": a.micro_batch, "max_steps": total,
                      "log_every": 1},
            "optim": {"lr": 6e-4, "warmup_steps": 2},
            "data": {"train": data},
        })
        testlib.run([ztrain, "train", spec])
        with open(os.path.join(work, "run", "metrics.jsonl")) as f:
            recs = [json.loads(l) for l in f if '"train"' in l]
        z_ms = statistics.median(r["step_ms"] for r in recs[warm:])
        # PyTorch: same model from ztrain's initial state, same first batches
        h5 = os.path.join(work, "state.h5")
        testlib.run([ztrain, "debug", "dump-state", spec, "--out", h5, "--steps", str(total)])
        f = h5py.File(h5, "r")
        m = GPT(a.n_layer, a.n_head, a.d_model, 4 * a.d_model, a.vocab, a.seq_len)
        with torch.no_grad():
            for n, p in m.named_parameters():
                p.copy_(torch.from_numpy(f["params"][n][()]))
        decay = [p for p in m.parameters() if p.dim() >= 2]
        rest = [p for p in m.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
        xin = torch.from_numpy(f["train"]["inputs"][()]).long()
        xtg = torch.from_numpy(f["train"]["targets"][()]).long()
        t_ms = []
        for s in range(total):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = m(xin[s], xtg[s])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            t_ms.append((time.perf_counter() - t0) * 1e3)
        p_ms = statistics.median(t_ms[warm:])
    tokens = a.micro_batch * a.seq_len
    print(f"model: {a.n_layer} layers, d_model {a.d_model}, {a.n_head} heads, seq_len {a.seq_len}, "
          f"vocab {a.vocab}, micro_batch {a.micro_batch}, fp32, {a.threads} threads, median of {a.steps} steps")
    print(f"ztrain : {z_ms:8.1f} ms/step  {tokens / z_ms * 1e3:9.0f} tokens/s")
    print(f"PyTorch: {p_ms:8.1f} ms/step  {tokens / p_ms * 1e3:9.0f} tokens/s  (torch {torch.__version__})")
    print(f"ratio ztrain/PyTorch tokens/s: {p_ms / z_ms:.2f}x")


if __name__ == "__main__":
    main()
