#!/usr/bin/python3
"""PyTorch parity for low-rank adapters ([lora], issue 48), GPT-2 and Llama-shaped models, fp32 and
bf16 compute (--device cuda: the CUDA backend, exit 77 without a GPU).

ztrain dumps its frozen weights, its adapters (B zero, A drawn), the first batch's loss and the
adapters' gradients, then 10 AdamW steps (`ztrain debug dump-state`). The reference is written here
from the method (Hu et al. 2021, PEFT's layout): the PyTorch model of tests/torch_*.py with every
weight frozen and each targeted nn.Linear wrapped as base(x) + alpha / r * lora_B(lora_A(x)).
Checked, with model_parity.py's tolerances:
- the loss, and every adapter gradient (the base has none: ztrain must dump none);
- 10 training steps of torch.optim.AdamW over the adapters alone (the HF trainer's decay: every
  matrix): losses, gradient norms, the adapters' final values;
- the frozen weights after training are bit-identical to the start (a base weight that received
  an update shows here);
- with dropout (PEFT's lora_dropout, on the adapters' input in training): the reference draws
  ztrain's documented mask itself (Philox-4x32-10 written here in numpy, keyed by the layer's name
  and the seed, at each element's index in the global batch), so the 10 steps compare exactly as
  without; a reference without the mask is told apart.
At initialization B = 0, so A's gradient is exactly zero; the steps after the first (B moved)
check A's path.
"""
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

h5py, np, torch = testlib.require("h5py", "numpy", "torch", what="PyTorch/h5py", hint="install python3-torch python3-h5py")
import model_parity as mp  # noqa: E402

nn = torch.nn

# role -> the reference's module path inside a block, per family
ROLES = {
    "gpt2": {"qkv": "attn.c_attn", "o": "attn.c_proj", "up": "mlp.c_fc", "down": "mlp.c_proj"},
    "llama": {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
              "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"},
}


M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


def fnv1a64(text):
    h = 1469598103934665603
    for ch in text.encode():
        h = ((h ^ ch) * 1099511628211) & M64
    return h


def philox_bits(key, index):
    """Philox-4x32-10's first word for counter (index, 0x64726F70) and `key` (engine/core/philox.h),
    index a uint64 numpy array."""
    c0, c1 = index & np.uint64(M32), index >> np.uint64(32)
    c2, c3 = np.full_like(index, 0x64726F70), np.zeros_like(index)
    k0, k1 = key & M32, key >> 32
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & np.uint64(M32),
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & np.uint64(M32))
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0


def dropout_mask(module, seed, first_sample, B, T, width, p):
    """ztrain's keep mask / (1 - p) for rows of samples first_sample.. (B, T, width)."""
    key = fnv1a64(module + ".lora_dropout") ^ ((seed * 0x9E3779B97F4A7C15) & M64)
    rows = (np.uint64(first_sample) * np.uint64(T) + np.arange(B * T, dtype=np.uint64)).reshape(B, T, 1)
    index = rows * np.uint64(width) + np.arange(width, dtype=np.uint64).reshape(1, 1, width)
    u = ((philox_bits(key, index).astype(np.float64) + 1.0) * (1.0 / 4294967296.0)).astype(np.float32)
    keep = (u > np.float32(p)).astype(np.float32)
    return torch.from_numpy(keep * np.float32(1.0 / np.float32(1.0 - np.float32(p))))


class LoRALinear(nn.Module):
    """base(x) + scale * B(A(dropout(x))); the base frozen, PEFT's names lora_A / lora_B. The
    dropout mask is ztrain's (dropout_mask), drawn for the batch whose first sample `batch[0]` holds
    (a list the model's layers share), in training only."""

    def __init__(self, base, r, alpha, p=0.0, module="", seed=0, batch=None):
        super().__init__()
        self.base, self.scale = base, alpha / r
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        self.p, self.module, self.seed, self.batch = p, module, seed, batch

    def forward(self, x):
        xa = x
        if self.p > 0 and self.training and self.batch[0] is not None:
            xa = x * dropout_mask(self.module, self.seed, self.batch[0], x.shape[0], x.shape[1], x.shape[2], self.p)
        return self.base(x) + self.scale * self.lora_B(self.lora_A(xa))


def blocks(m, arch):
    return m.transformer.h if arch == "gpt2" else m.model.layers


def with_adapters(model, lora, seed=0, mask=True):
    """The reference model for `model` with adapters on lora["targets"] (every weight frozen);
    m.batch[0] = the first sample of the batch it runs (for the dropout mask; `mask` False: none)."""
    arch = model.get("arch", "gpt2")
    m = mp.reference(model)
    m.batch = [None]
    for p in m.parameters():
        p.requires_grad_(False)
    family = "gpt2" if arch == "gpt2" else "llama"
    targets = lora["targets"].split(",")
    prefix = "transformer.h" if arch == "gpt2" else "model.layers"
    for i, block in enumerate(blocks(m, arch)):
        for role in targets:
            parent_path, leaf = ROLES[family][role].rsplit(".", 1)
            parent = block.get_submodule(parent_path)
            setattr(parent, leaf, LoRALinear(getattr(parent, leaf), lora["rank"], lora["alpha"],
                                             lora.get("dropout", 0.0) if mask else 0.0,
                                             f"{prefix}.{i}.{ROLES[family][role]}", seed, m.batch))
    return m


def base_name(n):
    return n.replace(".base.", ".")


def load(m, f, group):
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(torch.from_numpy(f[group][base_name(n)][()]))


def check_case(args, work, name, model, lora, train, optim, device, compute):
    spec = os.path.join(work, f"{name}.toml")
    testlib.write_spec(spec, {
        "run": {"name": name, "out_dir": os.path.join(work, name), "seed": SEED, "device": device, "threads": 2},
        "model": model, "lora": lora, "train": train, "optim": optim, "data": {"train": args.data},
        "precision": {"compute": compute},
    })
    h5path = os.path.join(work, f"{name}.h5")
    p = testlib.run([args.ztrain, "debug", "dump-state", spec, "--out", h5path, "--steps", "10"], check=False)
    if device == "cuda" and p.returncode == 2 and ("no CUDA device is visible" in p.stderr
                                                   or "built without CUDA" in p.stderr):
        print(f"  [{name}] SKIP on CUDA: {p.stderr.strip().splitlines()[-1]}")
        return None
    if p.returncode != 0:
        return [f"dump-state failed ({p.returncode}): {p.stderr[-800:]}"]
    f = h5py.File(h5path, "r")
    cfg = {**mp.SPEC_DEFAULTS, **optim, **train}
    m = with_adapters(model, lora, SEED)
    trained = [n for n, p in m.named_parameters() if ".lora_" in n]
    frozen = [base_name(n) for n, p in m.named_parameters() if ".lora_" not in n]
    failures = []
    if sorted(f["grads"].keys()) != sorted(trained):
        failures.append(f"gradients dumped for {sorted(f['grads'].keys())[:4]}..., expected the adapters' "
                        f"{sorted(trained)[:4]}... only")
        return failures
    load(m, f, "params")
    for n, p in m.named_parameters():
        if n.endswith("lora_B.weight") and p.abs().max().item() != 0:
            failures.append(f"{n} does not start at zero")
        if ".lora_" in n:
            p.requires_grad_(True)
    x = torch.from_numpy(f["batch"]["inputs"][()]).long()
    y = torch.from_numpy(f["batch"]["targets"][()]).long()
    with torch.no_grad():
        ref_logits = m(x)  # logits without targets: no dropout, as ztrain's inference forward
    m.batch[0] = 0  # the dump's first training forward: samples 0..B-1, as the first step's
    loss = m(x, y)
    loss.backward()
    tol = mp.tolerances(compute, model.get("arch", "gpt2"), model["n_layer"], loss.item(), ref_logits.abs().max().item())
    zl0 = float(f["out"]["loss"][()])
    e = abs(loss.item() - zl0) / abs(loss.item())
    print(f"  [{name}] loss ztrain {zl0:.7f} torch {loss.item():.7f} rel {e:.2e} (bound {tol['loss']:.1e})")
    if e > tol["loss"]:
        failures.append(f"loss rel err {e:.2e} > {tol['loss']:.1e}")
    worst = (0.0, "")
    for n, p in m.named_parameters():
        if ".lora_" not in n:
            continue
        g = torch.from_numpy(f["grads"][n][()])
        if n.endswith("lora_A.weight"):  # exactly zero while B is
            if g.abs().max().item() != 0:
                failures.append(f"grad {n} is not zero at B = 0")
            continue
        err = mp.rel(g, p.grad)
        worst = max(worst, (err, n))
        if err > tol["grad"]:
            failures.append(f"grad {n}: rel err {err:.2e} > {tol['grad']:.1e}")
    print(f"  [{name}] worst lora_B gradient rel err {worst[0]:.2e} ({worst[1]}; bound {tol['grad']:.1e}), "
          f"{len(trained)} adapter tensors, {len(frozen)} frozen")
    failures += train_and_compare(name, m, f, cfg, tol, compute, frozen)
    if lora.get("dropout", 0) > 0 and compute == "fp32":  # planted: a reference that drops nothing
        plain = with_adapters(model, lora, SEED, mask=False)
        missed = train_and_compare(name + " planted: no dropout mask", plain, f, cfg, tol, compute, frozen)
        print(f"  [{name}] planted in the reference, no dropout mask: {len(missed)} checks fail")
        if not missed:
            failures.append("planted: a reference without the dropout mask passes: the check cannot tell")
    return failures


def train_and_compare(name, m, f, cfg, tol, compute, frozen):
    """Ten AdamW steps of the reference `m` over the adapters alone, from the dump's start, against
    ztrain's losses, gradient norms and final adapters; the failures."""
    failures = []
    load(m, f, "params")
    for n, p in m.named_parameters():
        p.requires_grad_(".lora_" in n)
    opt = torch.optim.AdamW([p for n, p in m.named_parameters() if ".lora_" in n], lr=cfg["lr"],
                            betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"], weight_decay=cfg["weight_decay"])
    tin = torch.from_numpy(f["train"]["inputs"][()]).long()
    ttg = torch.from_numpy(f["train"]["targets"][()]).long()
    mb, gb = int(cfg["micro_batch"]), int(cfg["global_batch"])
    zl, znorm = f["train"]["loss"][()], f["train"]["grad_norm"][()]
    first, worst_step = None, 0.0
    for s in range(tin.shape[0]):
        opt.zero_grad()
        total = 0.0
        for a in range(gb // mb):
            m.batch[0] = s * gb + a * mb  # the micro-batch's first global sample (one rank)
            l = m(tin[s, a * mb:(a + 1) * mb], ttg[s, a * mb:(a + 1) * mb]) / (gb // mb)
            l.backward()
            total += l.item()
        first = total if first is None else first
        norm = float(torch.nn.utils.clip_grad_norm_([p for n, p in m.named_parameters() if ".lora_" in n],
                                                    cfg["grad_clip"] if cfg["grad_clip"] > 0 else math.inf))
        if s > 0:  # step 1: A's gradient is exactly zero, B's checked above
            e = abs(znorm[s] - norm) / norm
            if e > tol["grad"]:
                failures.append(f"train step {s + 1}: grad_norm ztrain {znorm[s]:.7f} torch {norm:.7f} rel {e:.2e}")
        for g in opt.param_groups:
            g["lr"] = mp.lr_at(cfg, s)
        opt.step()
        e = abs(total - zl[s]) / abs(total)
        bound = tol["loss"] + tol["grad"] * abs(total - first) / abs(total) if compute != "fp32" else tol["train_loss"]
        worst_step = max(worst_step, e / bound)
        if e > bound:
            failures.append(f"train step {s + 1}: loss ztrain {zl[s]:.7f} torch {total:.7f} rel {e:.2e} > {bound:.1e}")
    print(f"  [{name}] 10-step losses ztrain {zl[0]:.5f} -> {zl[-1]:.5f}, torch final {total:.5f} "
          f"(worst step at {worst_step:.2f} of its bound)")
    worst = (0.0, "")
    for n, p in m.named_parameters():
        if ".lora_" not in n:
            continue
        a, b, a0 = torch.from_numpy(f["final"][n][()]), p.detach(), torch.from_numpy(f["params"][n][()])
        err = mp.rel(a, b) if compute == "fp32" else ((a - b).norm() / max((b - a0).norm().item(), 1e-30)).item()
        worst = max(worst, (err, n))
        if err > tol["final"]:
            failures.append(f"final {n}: rel err {err:.2e} > {tol['final']:.1e}")
    moved = [n for n in frozen if not np.array_equal(f["final"][n][()], f["params"][n][()])]
    if moved:
        failures.append(f"frozen weights changed by training: {moved[:3]}")
    print(f"  [{name}] worst final adapter rel err {worst[0]:.2e} ({worst[1]}; bound {tol['final']:.1e}); "
          f"frozen weights unchanged: {not moved}")
    return failures


SEED = 1234  # the specs' [run] seed: the dropout mask's

CASES = {
    "gpt2": [("gpt2_lora", {"n_layer": 2, "n_head": 3, "d_model": 27, "d_ff": 37, "vocab_size": 263, "seq_len": 33},
              {"rank": 4, "alpha": 8.0, "targets": "all"},
              {"micro_batch": 2, "global_batch": 4, "max_steps": 10},
              {"lr": 1e-2, "min_lr": 0.0, "warmup_steps": 2, "schedule": "linear", "grad_clip": 0.5})],
    # every Llama role, grouped-query attention, untied head; rank 3 with alpha 5 (scale 5/3)
    "llama": [("llama_lora", {"arch": "llama", "n_layer": 2, "n_head": 6, "n_kv_head": 2, "d_model": 36, "d_ff": 50,
                              "vocab_size": 263, "seq_len": 21, "rope_theta": 500.0},
               {"rank": 3, "alpha": 5.0, "targets": "all"},
               {"micro_batch": 2, "global_batch": 4, "max_steps": 10},
               {"lr": 1e-2, "warmup_steps": 2, "weight_decay": 0.2}),
              # PEFT's usual lora_dropout, on every adapter's input
              ("llama_lora_dropout", {"arch": "llama", "n_layer": 2, "n_head": 6, "n_kv_head": 2, "d_model": 36,
                                      "d_ff": 50, "vocab_size": 263, "seq_len": 21, "rope_theta": 500.0},
               {"rank": 3, "alpha": 5.0, "targets": "all", "dropout": 0.1},
               {"micro_batch": 2, "global_batch": 4, "max_steps": 10},
               {"lr": 1e-2, "warmup_steps": 2})],
}


def main():
    ap = testlib.arg_parser()
    ap.add_argument("--arch", choices=("gpt2", "llama"), default="llama")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(2)
    failures = []
    with tempfile.TemporaryDirectory() as work:
        args.data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 7)
        for compute in ("fp32", "bf16"):
            for name, model, lora, train, optim in CASES[args.arch]:
                if lora["targets"] == "all":
                    lora = {**lora, "targets": ",".join(ROLES["gpt2" if args.arch == "gpt2" else "llama"])}
                got = check_case(args, work, f"{name}_{args.device}_{compute}", model, lora, train, optim, args.device,
                                 compute)
                if got is None:
                    print("SKIP: no CUDA device visible")
                    return testlib.SKIP
                failures += [f"{name} ({args.device}, {compute}): {x}" for x in got]
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print(f"PASS ({args.arch}, {args.device}): LoRA loss, adapter gradients and 10 AdamW steps agree with PyTorch "
          f"(fp32, bf16); the frozen weights never moved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
