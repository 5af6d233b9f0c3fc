#!/usr/bin/python3
"""PyTorch parity for the GPT-2 and Llama-shaped models (--arch: gpt2, llama, qwen2, qwen3, mistral),
fp32, bf16 and fp16 compute.

For several odd model sizes: ztrain writes its initial parameters, first batch, loss and every
gradient (`ztrain debug dump-state`), plus 10 training steps; PyTorch builds the same model
(tests/torch_gpt.py, tests/torch_llama.py: independent references) from those parameters and must agree on the loss and on every gradient (normalized error
||a - b|| / ||b|| <= 1e-4 per tensor), and 10 steps of torch.optim.AdamW with the same schedule,
clipping and batches must give the same losses (relative error <= 1e-4) and final parameters.

bf16 and fp16 compute (activations and compute weights rounded to 16 bits, fp32 masters) are
compared with the same fp32 PyTorch model: the reference is the exact computation, the upper
bounds are what the 16-bit significand allows and the lower bounds show that the storage is
really 16-bit (derivation above tolerances()). --device cuda runs the same on the CUDA backend
(exit 77, skipped, without a GPU).
"""
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

# a user's machine may lack the reference stack
h5py, np, torch, torch_gpt, torch_llama = testlib.require("h5py", "numpy", "torch", "torch_gpt", "torch_llama",
                                                         what="PyTorch/h5py", hint="install python3-torch python3-h5py")
GPT, Llama = torch_gpt.GPT, torch_llama.Llama

TOL = {"loss": 1e-4, "grad": 1e-4, "train_loss": 1e-4, "final": 1e-4}

# 16-bit compute is compared with the same fp32 PyTorch model (the exact computation). Its bounds
# come from the arithmetic, not from a run:
# - u: storing a value rounds it to nearest even, a relative change of at most half an ulp
#   (testlib.UNIT_ROUNDOFF: 2^-8 bf16, 2^-11 fp16).
# - A gradient reaches the loss through k stored tensors, each rounded once
#   (testlib.gpt2_roundings: 17 per block + 4). Independent roundings add in quadrature:
#   sqrt(k) u (testlib.rounding_bound), each rounding counted at its worst (its rms is about u / 2.5).
# - The loss: every logit z carries that relative error, and a cross-entropy moves by at most
#   twice the largest change of a logit, so |d loss| <= 2 sqrt(k) u max|z| (max|z| from the fp32
#   reference).
# - 10 training steps: each step's loss has the loss bound; the parameters it is computed on moved
#   along updates whose relative error is at most the gradient bound, and the loss changed by
#   |loss_s - loss_1| along them, so the step-s loss error is bounded by
#   loss bound + gradient bound * |loss_s - loss_1| / loss_s.
# - Final parameters: Adam divides each gradient element by its own running rms, so an element
#   whose gradient is near the rounding noise (the biases that start at 0, fp16 gradients near
#   its subnormals) takes full-size steps in a direction the rounding decides: no per-element
#   bound follows from u. What holds is the direction of training: the error relative to how far
#   the tensor moved, ||ztrain - torch|| / ||torch - initial||, stays below 1/2; a tensor that did
#   not train gives 1, one trained the wrong way up to 2.
# Lower bounds (evidence that the storage is really 16-bit, not fp32 under another name): the
# compute copy of every parameter and every dumped logit is exactly representable in the 16-bit
# type (the compute copy is the parameter rounded to nearest even), and the worst gradient differs
# from fp32 by at least u / 16: the ln_f output alone is stored rounded (rms relative error about
# u / 2.5), and the tied embedding's gradient is a sum of products with it (fp32: about 1e-7).


def representable(x, compute):
    """True where the fp32 values of x are exactly values of the 16-bit type."""
    return round_to(x, compute) == x


def round_to(x, compute):
    """x (fp32 numpy) rounded to nearest even in the 16-bit type, widened back to fp32."""
    if compute == "fp16":
        return x.astype(np.float16).astype(np.float32)
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


# The reference takes every hyperparameter from the spec this test writes (and the defaults the
# docs/run-spec.md documents for keys it leaves out), never from ztrain's dump: a key ztrain misreads shows.
SPEC_DEFAULTS = {"lr": 6e-4, "min_lr": 6e-5, "warmup_steps": 0, "schedule": "cosine", "weight_decay": 0.1,
                 "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0}


def lr_at(cfg, step):
    """The schedule of docs/run-spec.md: linear warmup to lr over warmup_steps, then `schedule` from lr down to
    min_lr over the remaining steps (cosine: half a cosine period; linear; constant: lr)."""
    if step < cfg["warmup_steps"]:
        return cfg["lr"] * (step + 1) / cfg["warmup_steps"]
    if cfg["schedule"] == "constant":
        return cfg["lr"]
    decay_steps = max(1, cfg["max_steps"] - cfg["warmup_steps"])
    progress = min(1.0, (step - cfg["warmup_steps"]) / decay_steps)
    if cfg["schedule"] == "linear":
        return cfg["lr"] + progress * (cfg["min_lr"] - cfg["lr"])
    return cfg["min_lr"] + (cfg["lr"] - cfg["min_lr"]) * (1 + math.cos(math.pi * progress)) / 2


def rel(a, b):
    return ((a - b).norm() / max(b.norm().item(), 1e-30)).item()


def storage_evidence(f, compute, names):
    """Failures if the dump does not show `compute` storage: the compute copy of every parameter is
    the fp32 master rounded to nearest even, and every logit is representable. For fp32: no
    compute copy, and logits that are not all representable in bf16 (so the check can fail)."""
    logits = f["out"]["logits"][()]
    if compute == "fp32":
        if "compute" in f:
            return ["fp32 run dumped a 16-bit compute copy"]
        frac = representable(logits, "bf16").mean()
        return [] if frac < 0.5 else [f"fp32 logits: {frac:.0%} representable in bf16 (not fp32 values)"]
    if "compute" not in f:
        return [f"{compute} run dumped no compute copy: its parameters are fp32"]
    out = []
    for n in names:
        c, master = f["compute"][n][()], f["params"][n][()]
        if not representable(c, compute).all() or not (c == round_to(master, compute)).all():
            out.append(f"compute copy of {n} is not the {compute}-rounded master")
    bad = (~representable(logits, compute)).sum()
    if bad:
        out.append(f"{bad} of {logits.size} logits are not {compute} values")
    return out


def tolerances(compute, arch, n_layer, loss, max_logit):
    if compute == "fp32":
        return TOL
    u, grad = testlib.UNIT_ROUNDOFF[compute], testlib.rounding_bound(compute, n_layer, arch)
    return {"loss": 2 * grad * max_logit / loss, "grad": grad, "grad_floor": u / 16, "final": 0.5}


def reference(model, plant=None):
    """The PyTorch model for a [model] table (the defaults docs/run-spec.md gives for keys it leaves out);
    `plant`: a bug in its RoPE scaling (torch_llama.llama3_inv_freq) or in a family's attention
    (torch_llama.Attention)."""
    if model.get("arch", "gpt2") == "gpt2":
        return GPT(model["n_layer"], model["n_head"], model["d_model"], model.get("d_ff", 4 * model["d_model"]),
                   model["vocab_size"], model["seq_len"])
    scaling = None
    if model.get("rope_scaling") == "llama3":
        scaling = {"factor": model["rope_scaling_factor"], "low_freq_factor": model["rope_scaling_low_freq_factor"],
                   "high_freq_factor": model["rope_scaling_high_freq_factor"],
                   "original_max_position_embeddings": model["rope_scaling_original_max_positions"], "plant": plant}
    arch = model["arch"]  # the family's options, as its modeling file has them (tests/torch_llama.py)
    return Llama(model["n_layer"], model["n_head"], model.get("n_kv_head", model["n_head"]), model["d_model"],
                 model["d_ff"], model["vocab_size"], model.get("rope_theta", 10000.0), model.get("norm_eps", 1e-5),
                 model.get("tie_embeddings", False), scaling, head_dim=model.get("head_dim"),
                 qkv_bias=arch == "qwen2", qk_norm=arch == "qwen3",
                 plant=plant if plant in ("qk norm after rope", "bias on o", "scale from d_model") else None)


# The bugs planted in the reference (fp32) to show the checks can tell each: per the case's kind.
PLANTS = {"llama3": ("scaling ignored", "smooth band off by one"), "qwen2": ("bias on o",),
          "qwen3": ("qk norm after rope",), "mistral": ("scale from d_model",)}


def planted(f, model, x, y, plant):
    """The worst gradient error of the reference with a bug planted in it, against ztrain's."""
    m = reference(model, plant)
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(torch.from_numpy(f["params"][n][()]))
    m(x, y).backward()
    return max(rel(torch.from_numpy(f["grads"][n][()]), p.grad) for n, p in m.named_parameters())


def check_case(args, work, name, model, train, optim, device="cpu", compute="fp32"):
    spec = os.path.join(work, f"{name}.toml")
    testlib.write_spec(spec, {
        "run": {"name": name, "out_dir": os.path.join(work, name), "seed": 1234, "device": device, "threads": 2},
        "model": model, "train": train, "optim": optim, "data": {"train": args.data},
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
    cfg = {**SPEC_DEFAULTS, **optim, **train}
    m = reference(model)
    names = [n for n, _ in m.named_parameters()]
    assert sorted(names) == sorted(f["params"].keys()), (sorted(names), sorted(f["params"].keys()))
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(torch.from_numpy(f["params"][n][()]))
    failures = storage_evidence(f, compute, names)
    # 1. loss and every gradient on the first batch
    x = torch.from_numpy(f["batch"]["inputs"][()]).long()
    y = torch.from_numpy(f["batch"]["targets"][()]).long()
    with torch.no_grad():
        ref_logits = m(x)
    loss = m(x, y)
    loss.backward()
    tol = tolerances(compute, model.get("arch", "gpt2"), model["n_layer"], loss.item(), ref_logits.abs().max().item())
    ref_loss = float(f["out"]["loss"][()])
    e = abs(loss.item() - ref_loss) / abs(loss.item())
    print(f"  [{name}] loss ztrain {ref_loss:.7f} torch {loss.item():.7f} rel {e:.2e} (bound {tol['loss']:.1e})")
    if e > tol["loss"]:
        failures.append(f"loss rel err {e:.2e} > {tol['loss']:.1e}")
    le = rel(torch.from_numpy(f["out"]["logits"][()]), ref_logits[:, -1, :])
    if le > tol["grad"]:
        failures.append(f"last-position logits rel err {le:.2e} > {tol['grad']:.1e}")
    worst = (0.0, "")
    for n, p in m.named_parameters():
        g = torch.from_numpy(f["grads"][n][()])
        err = rel(g, p.grad)
        worst = max(worst, (err, n))
        if err > tol["grad"]:
            failures.append(f"grad {n}: rel err {err:.2e} > {tol['grad']:.1e}")
    print(f"  [{name}] worst gradient rel err {worst[0]:.2e} ({worst[1]}; bound {tol['grad']:.1e}"
          + (f", floor {tol['grad_floor']:.1e}" if "grad_floor" in tol else "") + f"), {len(names)} tensors")
    plants = PLANTS.get("llama3" if model.get("rope_scaling") == "llama3" else model.get("arch"), ())
    if compute == "fp32":  # the check can tell a wrong scaling, bias or norm placement
        for plant in plants:
            e = planted(f, model, x, y, plant)
            print(f"  [{name}] planted in the reference, {plant}: worst gradient rel err {e:.2e}")
            if e <= 10 * tol["grad"]:
                failures.append(f"planted '{plant}': gradient error only {e:.2e}: the check cannot tell it")
    if "grad_floor" in tol and worst[0] < tol["grad_floor"]:
        failures.append(f"worst gradient rel err {worst[0]:.2e} is below the {compute} rounding floor "
                        f"{tol['grad_floor']:.1e}: the compute is not {compute}")
    # 2. ten training steps from the same initialization
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(torch.from_numpy(f["params"][n][()]))
    decay = [p for n, p in m.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in m.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    tin = torch.from_numpy(f["train"]["inputs"][()]).long()
    ttg = torch.from_numpy(f["train"]["targets"][()]).long()
    mb, gb = int(cfg["micro_batch"]), int(cfg["global_batch"])
    accum = gb // mb
    zl = f["train"]["loss"][()]
    zlr, znorm = f["train"]["lr"][()], f["train"]["grad_norm"][()]
    if len(zl) != tin.shape[0] or len(zlr) != tin.shape[0] or len(znorm) != tin.shape[0]:
        failures.append(f"dump has {len(zl)} losses, {len(zlr)} lrs, {len(znorm)} norms for {tin.shape[0]} steps")
        return failures
    first = None
    worst_step = 0.0
    for s in range(tin.shape[0]):
        opt.zero_grad()
        total = 0.0
        for a in range(accum):
            l = m(tin[s, a * mb:(a + 1) * mb], ttg[s, a * mb:(a + 1) * mb]) / accum
            l.backward()
            total += l.item()
        first = total if first is None else first
        # the global norm before clipping (infinite max_norm: measured, not clipped)
        norm = float(torch.nn.utils.clip_grad_norm_(m.parameters(),
                                                    cfg["grad_clip"] if cfg["grad_clip"] > 0 else math.inf))
        e = abs(znorm[s] - norm) / norm
        if e > tol["grad"]:
            failures.append(f"train step {s + 1}: grad_norm ztrain {znorm[s]:.7f} torch {norm:.7f} rel {e:.2e}")
        lr = lr_at(cfg, s)
        if abs(zlr[s] - lr) > 1e-9 * lr:
            failures.append(f"train step {s + 1}: lr ztrain {zlr[s]:.9e}, schedule {lr:.9e}")
        for g in opt.param_groups:
            g["lr"] = lr
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
        a, b, a0 = torch.from_numpy(f["final"][n][()]), p.detach(), torch.from_numpy(f["params"][n][()])
        if n.endswith("attn.c_attn.bias"):
            # The key bias's gradient is exactly zero (softmax ignores a constant added to a row of
            # scores), so it holds only float noise, which Adam normalizes into full-size steps:
            # its values are arbitrary in both engines. Compare the q and v parts.
            c = a.shape[0] // 3
            a, b, a0 = (torch.cat([t[:c], t[2 * c:]]) for t in (a, b, a0))
        # fp32: relative to the parameter; 16-bit: relative to how far it moved (see the bounds)
        err = rel(a, b) if compute == "fp32" else ((a - b).norm() / max((b - a0).norm().item(), 1e-30)).item()
        worst = max(worst, (err, n))
        if err > tol["final"]:
            failures.append(f"final param {n}: rel err {err:.2e} > {tol['final']:.1e}")
    print(f"  [{name}] worst final-parameter rel err {worst[0]:.2e} ({worst[1]}; bound {tol['final']:.1e})")
    return failures


GPT2_CASES = [
    ("tiny", {"n_layer": 1, "n_head": 1, "d_model": 8, "vocab_size": 257, "seq_len": 7},
     {"micro_batch": 3, "global_batch": 3, "max_steps": 10},
     {"lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 2, "schedule": "cosine"}),
    ("odd", {"n_layer": 2, "n_head": 3, "d_model": 27, "d_ff": 37, "vocab_size": 263, "seq_len": 33},
     {"micro_batch": 2, "global_batch": 6, "max_steps": 10},
     {"lr": 3e-3, "min_lr": 0.0, "warmup_steps": 3, "schedule": "linear", "grad_clip": 0.5}),
    ("deeper", {"n_layer": 3, "n_head": 2, "d_model": 14, "vocab_size": 301, "seq_len": 17},
     {"micro_batch": 5, "global_batch": 5, "max_steps": 20},
     {"lr": 5e-3, "schedule": "constant", "weight_decay": 0.3, "beta2": 0.99}),
]

# Llama at odd sizes: grouped-query (6 heads, 2 key/value), multi-query (4 heads, 1), plain
# multi-head; head sizes 6, 10 and 4 (not powers of two), seq_len not a multiple of anything,
# tied and untied heads, a non-default rope_theta and norm_eps.
LLAMA_CASES = [
    ("gqa", {"arch": "llama", "n_layer": 2, "n_head": 6, "n_kv_head": 2, "d_model": 36, "d_ff": 50,
             "vocab_size": 263, "seq_len": 33, "rope_theta": 500.0},
     {"micro_batch": 2, "global_batch": 4, "max_steps": 10},
     {"lr": 3e-3, "min_lr": 0.0, "warmup_steps": 3, "schedule": "linear", "grad_clip": 0.5}),
    ("mqa_tied", {"arch": "llama", "n_layer": 1, "n_head": 4, "n_kv_head": 1, "d_model": 40, "d_ff": 64,
                  "vocab_size": 257, "seq_len": 19, "tie_embeddings": True, "norm_eps": 1e-6},
     {"micro_batch": 3, "global_batch": 3, "max_steps": 10},
     {"lr": 4e-3, "min_lr": 1e-3, "warmup_steps": 2, "schedule": "cosine"}),
    # Llama 3.1's RoPE scaling: head size 12 at theta 500 has wavelengths 6.3, 17.7, 49.8, 140, 395
    # and 1113 positions; an original context of 64 (high band below 16, low band above 64) puts
    # one frequency in each band's keep, two in the interpolated one and three scaled, and the run's
    # 80 positions go past the original context
    ("llama31", {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 48, "d_ff": 64,
                 "vocab_size": 260, "seq_len": 80, "rope_theta": 500.0, "rope_scaling": "llama3",
                 "rope_scaling_factor": 8.0, "rope_scaling_low_freq_factor": 1.0,
                 "rope_scaling_high_freq_factor": 4.0, "rope_scaling_original_max_positions": 64},
     {"micro_batch": 2, "global_batch": 2, "max_steps": 10},
     {"lr": 3e-3, "warmup_steps": 2}),
    ("mha", {"arch": "llama", "n_layer": 3, "n_head": 3, "d_model": 12, "d_ff": 20, "vocab_size": 301,
             "seq_len": 17},
     {"micro_batch": 5, "global_batch": 5, "max_steps": 20},
     {"lr": 5e-3, "schedule": "constant", "weight_decay": 0.3, "beta2": 0.99}),
]

# The families people fine-tune, at awkward sizes (one case each: the Llama cases above cover the
# shared machinery). Qwen2: q/k/v biases, 6 heads over 2 key/value heads, tied head as its small
# sizes, Qwen's norm_eps; rope_theta 500, not Qwen's 1e6 (tests/e2e/hf_families.py loads that):
# the key bias's gradient is only what RoPE's rotation leaves of a constant shift of each row of
# scores, which a slow rotation over 21 positions makes a small, cancellation-dominated remainder
# (at 1e6, bf16 on the emulated device: 2.4e-2 against the bound 2.5e-2, and its final values
# 0.75 of how far it moved apart, Adam normalizing the noise into full steps). Qwen3: per-head q/k norms, head_dim 10 with 3 heads
# (30 != d_model 20), multi-query. Mistral: Nemo's shape in small, head_dim 12 with 4 heads (48 !=
# d_model 32), untied.
QWEN2_CASES = [
    ("qwen2", {"arch": "qwen2", "n_layer": 2, "n_head": 6, "n_kv_head": 2, "d_model": 36, "d_ff": 50,
               "vocab_size": 263, "seq_len": 21, "rope_theta": 500.0, "norm_eps": 1e-6, "tie_embeddings": True},
     {"micro_batch": 2, "global_batch": 4, "max_steps": 10},
     {"lr": 3e-3, "min_lr": 0.0, "warmup_steps": 3, "schedule": "linear", "grad_clip": 0.5}),
]
QWEN3_CASES = [
    ("qwen3", {"arch": "qwen3", "n_layer": 2, "n_head": 3, "n_kv_head": 1, "d_model": 20, "head_dim": 10,
               "d_ff": 36, "vocab_size": 259, "seq_len": 19, "rope_theta": 1000000.0, "norm_eps": 1e-6,
               "tie_embeddings": True},
     {"micro_batch": 3, "global_batch": 3, "max_steps": 10},
     {"lr": 4e-3, "min_lr": 1e-3, "warmup_steps": 2, "schedule": "cosine"}),
]
MISTRAL_CASES = [
    ("mistral", {"arch": "mistral", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 32, "head_dim": 12,
                 "d_ff": 40, "vocab_size": 261, "seq_len": 17, "rope_theta": 1000000.0},
     {"micro_batch": 2, "global_batch": 4, "max_steps": 10},
     {"lr": 2e-3, "warmup_steps": 2}),
]


def main():
    ap = testlib.arg_parser()
    ap.add_argument("--arch", choices=("gpt2", "llama", "qwen2", "qwen3", "mistral"), default="gpt2")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="backend to compare with PyTorch (cuda: skipped, exit 77, without a GPU)")
    ap.add_argument("--cases", default="", help="comma list of the case names to run (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as work:
        args.data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 7)
        cases = {"gpt2": GPT2_CASES, "llama": LLAMA_CASES, "qwen2": QWEN2_CASES, "qwen3": QWEN3_CASES,
                 "mistral": MISTRAL_CASES}[args.arch]
        if args.cases:
            cases = [c for c in cases if c[0] in args.cases.split(",")]
            if not cases:
                sys.exit(f"no case named {args.cases}")
        failures = []
        for compute in ("fp32", "bf16", "fp16"):
            for name, model, train, optim in cases:
                got = check_case(args, work, f"{name}_{args.device}_{compute}", model, train, optim, args.device,
                                 compute)
                if got is None:  # no GPU: the whole CUDA comparison is a visible skip
                    print("SKIP: no CUDA device visible; the CUDA backend was not compared with PyTorch")
                    return testlib.SKIP
                failures += [f"{name} ({args.device}, {compute}): {x}" for x in got]
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print(f"PASS ({args.arch}, {args.device}): loss, every gradient and 10 AdamW steps agree with PyTorch: fp32 within {TOL['loss']}, "
          f"bf16 and fp16 within the rounding bounds, and their storage is 16-bit ({len(cases)} model sizes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
