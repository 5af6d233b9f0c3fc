#!/usr/bin/python3
"""Packed documents ([data] packing = "documents", issue 47), fp32:

1. Conversations (system prompts, multi-turn exchanges, an empty content, non-ASCII text, one
   longer than a row, which is cut into pieces) -> `ztrain-tokenize chat` (byte vocabulary, ChatML:
   loss on the assistant turns only) -> version 2 shards.
2. ztrain against itself: `ztrain debug dump-state` with packing = "documents" (several documents a
   row, the whole set in one batch) and with packing = "padded" (each document alone in its row,
   the whole set in one batch) give the same loss (the mean over the same tokens with loss) and
   the same gradients, within 2e-6 (CPU: only the summation order differs; see TOL_SELF).
3. ztrain against PyTorch (tests/torch_gpt.py, torch_llama.py: an explicit block-diagonal causal
   mask, positions restarted at each document, targets of -1 left out of the mean): the packed
   batch's loss and every gradient within 1e-4, as the model parity test's fp32 bound.
4. The comparison's power, each mask planted wrong once in the reference: attention across the
   documents' boundaries (a plain causal mask), positions not restarted (0..T-1 along the row),
   the prompt tokens in the loss (their targets restored): each moves the loss or a gradient
   far past the bound, so the check above would catch that bug in ztrain. (Positions not
   restarted is planted for GPT-2's learned positions only: Llama's RoPE scores depend on position
   differences alone, so under the documents' mask the shift changes nothing.)

usage: packed_parity.py --ztrain Z --tokenize T [--arch gpt2|llama] [--device cpu|cuda]
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

h5py, np, torch, torch_gpt, torch_llama = testlib.require("h5py", "numpy", "torch", "torch_gpt", "torch_llama",
                                                         what="PyTorch/h5py", hint="install python3-torch python3-h5py")

T = 128
# Several documents a row against each alone: the same sums in another order (the GEMMs' blocking
# follows the rows). The loss agrees to the last digit; the norms' weight and bias gradients (sums
# over every token whose terms cancel) differ by 1.0-1.4e-6 (measured), as ztrain's and PyTorch's do.
TOL_SELF, TOL_TORCH = 2e-6, 1e-4
MODELS = {
    "gpt2": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "d_model": 32, "vocab_size": 272, "seq_len": T},
    "llama": {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 32, "d_ff": 48,
              "vocab_size": 272, "seq_len": T},
}
def dump(args, work, name, model, packing, batch, device):
    """dump-state for one batch of `batch` rows; (h5 file, the log's sample count)."""
    spec = os.path.join(work, f"{name}.toml")
    testlib.write_spec(spec, {
        "run": {"name": name, "out_dir": os.path.join(work, name), "seed": 7, "device": device, "threads": 2},
        "model": model, "train": {"micro_batch": batch, "global_batch": batch, "max_steps": 1},
        "data": {"train": args.data, "packing": packing}, "precision": {"compute": "fp32"},
    })
    h5path = os.path.join(work, f"{name}.h5")
    p = testlib.run([args.ztrain, "debug", "dump-state", spec, "--out", h5path], check=False)
    if p.returncode != 0:
        sys.exit(f"dump-state {name} failed ({p.returncode}): {p.stderr[-1500:]}")
    m = re.search(r"\((\d+) tokens, (\d+) samples of (\d+) documents", p.stderr + p.stdout)
    if not m:
        sys.exit(f"dump-state {name}: no 'N samples of D documents' in its log:\n{p.stderr[-1500:]}")
    return h5py.File(h5path, "r"), int(m.group(2))


def whole_set(args, work, name, model, packing, device):
    """dump-state over every row of the set at once (the first run counts the rows)."""
    _, rows = dump(args, work, f"{name}_count", model, packing, 1, device)
    return dump(args, work, name, model, packing, rows, device)[0], rows


def reference(model):
    if model["arch"] == "gpt2":
        return torch_gpt.GPT(model["n_layer"], model["n_head"], model["d_model"], 4 * model["d_model"],
                             model["vocab_size"], model["seq_len"])
    return torch_llama.Llama(model["n_layer"], model["n_head"], model["n_kv_head"], model["d_model"], model["d_ff"],
                             model["vocab_size"])


def torch_run(f, model, forward):
    """(loss, {name: grad}) of the reference from the dump's parameters; forward(m) gives the loss."""
    m = reference(model)
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(torch.from_numpy(f["params"][n][()]))
    loss = forward(m)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in m.named_parameters()}


def compare(failures, what, loss_a, grads_a, loss_b, grads_b, tol):
    """Loss and every gradient of a against b; the worst relative error."""
    worst = (abs(loss_a - loss_b) / abs(loss_b), "loss")
    for n, g in grads_b.items():
        worst = max(worst, (testlib.rel(torch.as_tensor(np.asarray(grads_a[n])), g), n))
    print(f"  {what}: loss {loss_a:.7f} vs {loss_b:.7f}, worst relative error {worst[0]:.2e} ({worst[1]}; "
          f"bound {tol:.0e})")
    if worst[0] > tol:
        failures.append(f"{what}: relative error {worst[0]:.2e} ({worst[1]}) > {tol:.0e}")
    return worst[0]


def main():
    ap = testlib.arg_parser()
    ap.add_argument("--arch", choices=tuple(MODELS), default="gpt2")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(2)
    model = MODELS[args.arch]
    failures, plants = [], {}
    with tempfile.TemporaryDirectory() as work:
        args.data = testlib.make_chat_dataset(args.tokenize, os.path.join(work, "chat"), 3, long_answer=50)
        packed, rows = whole_set(args, work, "packed", model, "documents", args.device)
        padded, docs = whole_set(args, work, "padded", model, "padded", args.device)
        pos = packed["batch"]["positions"][()]
        starts = int((pos == 0).sum())
        print(f"  {args.arch} on {args.device}: {docs} documents (pieces) in {rows} packed rows of {T} "
              f"({starts} position restarts, padding included)")
        if rows >= docs:
            failures.append(f"packing put {docs} documents in {rows} rows: nothing was packed")
        if docs < 20:
            failures.append(f"only {docs} rows padded: the long conversation was not cut into pieces")
        grads = lambda f: {n: f["grads"][n][()] for n in f["grads"]}  # noqa: E731
        # 2. several documents a row == each document alone
        compare(failures, "packed rows vs one document a row (ztrain)", float(packed["out"]["loss"][()]),
                grads(packed), float(padded["out"]["loss"][()]),
                {n: torch.from_numpy(g) for n, g in grads(padded).items()}, TOL_SELF)
        # 3. against PyTorch's explicit masks
        x = torch.from_numpy(packed["batch"]["inputs"][()]).long()
        y = torch.from_numpy(packed["batch"]["targets"][()]).long()
        positions = torch.from_numpy(pos).long()
        ref_loss, ref_grads = torch_run(packed, model, lambda m: m(x, y, positions))
        compare(failures, "packed rows vs PyTorch", float(packed["out"]["loss"][()]), grads(packed), ref_loss,
                ref_grads, TOL_TORCH)
        # 4. each mask planted wrong in the reference: the comparison must fail
        shifted = torch.cat([x[:, 1:], torch.zeros_like(x[:, :1])], dim=1)  # every next token a target
        # a target of -1 whose next position continues the document (not its end, not padding)
        prompt_in_loss = torch.where((y < 0) & (positions.roll(-1, dims=1) > 0) & (shifted != 0), shifted, y)
        plants = {
            "attention across the documents (a plain causal mask)": lambda m: m(x, y, None),
            "prompt tokens in the loss": lambda m: m(x, prompt_in_loss, positions),
        }
        if args.arch == "gpt2":  # RoPE scores depend on position differences only: a document's
            # positions shifted by a constant change nothing under its own mask (nothing to catch)
            plants["positions not restarted (0..T-1 along the row)"] = lambda m: gpt2_running_positions(
                m, x, y, positions)
        for what, forward in plants.items():
            got = torch_run(packed, model, forward)
            err = compare([], f"planted: {what}", float(packed["out"]["loss"][()]), grads(packed), got[0], got[1],
                          TOL_TORCH)
            if err <= 10 * TOL_TORCH:
                failures.append(f"planted '{what}': relative error only {err:.2e}: the check cannot tell it")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print(f"PASS ({args.arch}, {args.device}): packed documents give each document's own loss and gradients "
          f"(within {TOL_SELF}) and PyTorch's block-diagonal reference (within {TOL_TORCH}); the {len(plants)} planted "
          "mask bugs are caught")
    return 0


def gpt2_running_positions(m, x, y, positions):
    """The GPT-2 reference's loss with the documents' attention mask but the position embedding's rows
    running on along the row (0..T-1)."""
    h = m.transformer.wte(x) + m.transformer.wpe(torch.arange(x.shape[1]))
    for blk in m.transformer.h:
        h = blk(h, positions)
    logits = m.transformer.ln_f(h) @ m.transformer.wte.weight.t()
    return torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1), ignore_index=-1)


if __name__ == "__main__":
    sys.exit(main())
