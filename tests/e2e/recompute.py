#!/usr/bin/python3
"""Activation recompute ([train] recompute) for GPT-2 and Llama on the CPU backend, at two sizes (and
Qwen3, and Llama with low-rank adapters on every layer, at one):
- the first batch's loss and every gradient, and the parameters after 5 AdamW steps, are
  bit-identical under "none", "selective" and "full" (recompute runs the same ops on the same
  inputs);
- the activation bytes of the memory line fall as the slots say: the expected bytes of each mode
  are computed here from the model's shapes, independently of ztrain's footprint code, and the
  measured figure (which adds token and loss scratch and alignment) is within 3% of them plus
  64 KiB; full keeps about one block plus the block inputs.
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

h5py, np = testlib.require("h5py", "numpy")
failures, expect = testlib.checks()
MEM = re.compile(r"activations ([\d.]+) MiB")


def expected_bytes(arch, m, B, mode, lora_rank=0):
    """The activation slots of each model (gpt2.h / llama.h Acts), 4-byte fp32 compute; with adapters
    (engine/model/lora.h) each layer's h (B*T, r) per adapter, the update's and the input gradient's
    scratch (B*T x the widest layer) and dh (B*T, r)."""
    L, C, T, V = m["n_layer"], m["d_model"], m["seq_len"], (m["vocab_size"] + 127) // 128 * 128
    F, NH = m["d_ff"], m["n_head"]
    BT = B * T
    Lw = 1 if mode == "full" else L      # what full recompute drops: one slot for every block
    Ln = L if mode == "none" else 1      # what selective drops too
    if arch == "gpt2":
        per_block_w = BT * (3 * C + C + C + C + F + F + C) + B * NH * T   # qkv atty attproj res2 fch gelu fcproj, lse
        per_block_n = BT * (C + C) + 4 * BT                               # ln1 ln2, their means and rstds
        head = BT * C + BT * C + 2 * BT + BT * V                          # encoded, lnf (+stats), logits
        scratch = BT * (C + C + 3 * C + C + F)                            # dres dln dqkv datty dfch
    else:
        hs, NKV, qk_norm = m.get("head_dim") or C // NH, m["n_kv_head"], arch == "qwen3"
        Wq = NH * hs
        Wqkv = Wq + 2 * NKV * hs
        # qkv (qk_norm: the projection), atty, attproj, res2, gate_up, mlp; lse; qk_norm: the heads' rstd
        per_block_w = BT * (Wqkv + Wq + C + C + 2 * F + C) + B * NH * T + (BT * (NH + NKV) if qk_norm else 0)
        per_block_n = BT * (C + C + F) + 2 * BT                           # ln1 ln2 act, rstds
        # qk_norm: q|k|v as attention reads them, one slot redone per block in backward
        head = BT * C + BT * C + BT + BT * V + (BT * Wqkv if qk_norm else 0)
        scratch = BT * (C + C + Wqkv + Wq + 2 * F + F)
    if lora_rank:  # every Llama layer adapted: q, k, v, o, gate, up, down
        widest = max(C, F, m["n_head"] * (m.get("head_dim") or C // NH))
        scratch += 7 * L * BT * lora_rank + 2 * BT * widest + BT * lora_rank
    return 4 * (Lw * per_block_w + Ln * per_block_n + L * BT * C + head + scratch)   # + res3 per block


def main():
    args = testlib.arg_parser().parse_args()
    models = {
        "gpt2": [{"n_layer": 4, "n_head": 2, "d_model": 32, "d_ff": 128, "vocab_size": 260, "seq_len": 32},
                 {"n_layer": 8, "n_head": 4, "d_model": 64, "d_ff": 256, "vocab_size": 260, "seq_len": 64}],
        "llama": [{"arch": "llama", "n_layer": 4, "n_head": 4, "n_kv_head": 2, "d_model": 32, "d_ff": 96,
                   "vocab_size": 260, "seq_len": 32},
                  {"arch": "llama", "n_layer": 8, "n_head": 8, "n_kv_head": 2, "d_model": 64, "d_ff": 176,
                   "vocab_size": 260, "seq_len": 64}],
        # per-head q/k norms (their projection kept, q|k redone in backward) and heads 12 wide over d_model 32
        # adapters over the frozen weights: their forward runs again with the block (full)
        "llama_lora": [{"arch": "llama", "n_layer": 4, "n_head": 4, "n_kv_head": 2, "d_model": 32, "d_ff": 96,
                        "vocab_size": 260, "seq_len": 32}],
        "qwen3": [{"arch": "qwen3", "n_layer": 4, "n_head": 4, "n_kv_head": 2, "head_dim": 12, "d_model": 32,
                   "d_ff": 96, "vocab_size": 260, "seq_len": 32}],
    }
    B = 4
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 5)
        for arch, sizes in models.items():
            for size, model in enumerate(sizes):
                ref, mem = None, {}
                for mode in ("none", "selective", "full"):
                    name = f"{arch}{size}_{mode}"
                    lora = {"lora__rank": 2, "lora__targets": "all"} if arch == "llama_lora" else {}
                    spec = testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, name), data,
                                             model, {"micro_batch": B, "global_batch": 2 * B, "max_steps": 5,
                                                     "log_every": 1, "recompute": mode},
                                             optim={"lr": 3e-3}, seed=3, threads=2, **lora)
                    h5 = os.path.join(work, name + ".h5")
                    p = testlib.run([args.ztrain, "debug", "dump-state", spec, "--out", h5, "--steps", "5"], check=False)
                    if p.returncode != 0:
                        failures.append(f"{name}: dump-state exit {p.returncode}: {p.stderr[-800:]}")
                        continue
                    p = testlib.run([args.ztrain, "train", spec, "--set", "train.max_steps=1"], check=False)
                    m = MEM.search(p.stderr)
                    expect(p.returncode == 0 and m, f"{name}: no memory line ({p.returncode}): {p.stderr[-600:]}")
                    if not m:
                        continue
                    mem[mode] = float(m[1]) * 1048576
                    want = expected_bytes(model.get("arch", "gpt2"), model, B, mode, 2 if lora else 0)
                    expect(want <= mem[mode] <= 1.03 * want + 65536,
                           f"{name}: activations {mem[mode]:.0f} bytes, the slots say {want} (+3% + 64 KiB scratch)")
                    f = h5py.File(h5, "r")
                    if ref is None:
                        ref = f
                        continue
                    same_loss = f["out"]["loss"][()] == ref["out"]["loss"][()]
                    diff = [n for n in ref["grads"] if not np.array_equal(f["grads"][n][()], ref["grads"][n][()])]
                    fdiff = [n for n in ref["final"] if not np.array_equal(f["final"][n][()], ref["final"][n][()])]
                    expect(same_loss and not diff and not fdiff,
                           f"{name}: not bit-identical to none: loss {same_loss}, gradients {diff[:3]}, "
                           f"final parameters {fdiff[:3]}")
                    print(f"{name}: loss, {len(ref['grads'])} gradients and 5-step parameters bit-identical to none")
                if len(mem) == 3:
                    print(f"{arch} size {size} ({model['n_layer']} layers, d_model {model['d_model']}, seq_len "
                          f"{model['seq_len']}, micro_batch {B}): activations none {mem['none'] / 1048576:.3f} MiB, "
                          f"selective {mem['selective'] / 1048576:.3f} MiB ({mem['selective'] / mem['none']:.0%}), "
                          f"full {mem['full'] / 1048576:.3f} MiB ({mem['full'] / mem['none']:.0%})")
                    expect(mem["full"] < mem["selective"] < mem["none"], f"{arch}{size}: memory not decreasing: {mem}")
    return testlib.report(failures, "recompute none / selective / full: identical gradients and training, "
                                    "activation memory as the slots predict")


if __name__ == "__main__":
    sys.exit(main())
