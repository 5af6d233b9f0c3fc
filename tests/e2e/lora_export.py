#!/usr/bin/python3
"""LoRA's exports and imports (issue 48), GPT-2 and Llama, fp32 on the CPU backend. The base is a
Hugging Face directory ztrain exported from a short full fine-tuning run; adapters on every layer
train over it ([model] init_from) and are checkpointed. Then:
- `ztrain export --format peft` writes what PEFT's save_pretrained writes (its documentation:
  adapter_model.safetensors holding base_model.model.<module>.lora_A.weight (r, in) and
  .lora_B.weight (out, r); adapter_config.json with peft_type "LORA", task_type, r, lora_alpha,
  lora_dropout, target_modules, fan_in_fan_out (true for GPT-2's Conv1D layers), bias "none",
  base_model_name_or_path); checked field by field here;
- `--format hf --merge-lora` writes every base tensor, W + alpha / r B A where an adapter is
  (GPT-2's Conv1D in its (in, out) layout), checked against the base and the PEFT tensors in numpy
  within float noise; the untouched tensors bit-identical;
- the merged model loaded through [model] init_from (no adapters) has the adapter run's loss on
  the same batch (relative 1e-5), and so does a fresh LoRA run started from the PEFT directory
  ([lora] init_from);
- refusals: a plain --format hf of adapters, a merge over a base of the same shapes that is not
  the one trained on (its fingerprint), PEFT adapters of another rank, --format peft of a whole
  model.
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

h5py, np = testlib.require("h5py", "numpy")
failures, expect = testlib.checks()

MODELS = {"gpt2": {"n_layer": 2, "n_head": 2, "d_model": 16, "d_ff": 40, "vocab_size": 260, "seq_len": 16},
          "llama": {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 24, "d_ff": 40,
                    "vocab_size": 260, "seq_len": 16}}
TARGETS = {"gpt2": {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"},
           "llama": {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                     "mlp.up_proj", "mlp.down_proj"}}
CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")
RANK, ALPHA = 2, 3.0


def main():
    args = testlib.arg_parser().parse_args()
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 7)
        for arch, model in MODELS.items():
            check_arch(args, os.path.join(work, arch), data, arch, model)
    return testlib.report(failures, "LoRA exports: PEFT's format field by field; the merged model is base + "
                                    "alpha/r B A and has the adapter run's loss; PEFT adapters start a run")


def check_arch(args, work, data, arch, model):
    os.makedirs(work)

    def spec(name, lora=True, **over):
        adapters = {"lora__rank": RANK, "lora__alpha": ALPHA, "lora__targets": "all"} if lora else {}
        return testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, name), data, model, seed=3,
                                 train={"micro_batch": 2, "global_batch": 2, "max_steps": 4, "log_every": 1},
                                 optim={"lr": 2e-2, "warmup_steps": 1}, **{**adapters, **over})

    def ztrain(*argv):
        return testlib.run([args.ztrain, *argv], check=False)

    def loss_of(path, *sets):
        out = os.path.join(work, f"dump{len(os.listdir(work))}.h5")
        p = ztrain("debug", "dump-state", path, "--out", out, *sets)
        expect(p.returncode == 0, f"[{arch}] dump-state {sets}: exit {p.returncode}: {p.stderr[-600:]}")
        return float(h5py.File(out, "r")["out"]["loss"][()]) if p.returncode == 0 else float("nan")

    # the base: a short full fine-tuning run, exported
    p = ztrain("train", spec("full", False, checkpoint__dir=os.path.join(work, "full_ckpt")), "--set", "train.max_steps=2")
    expect(p.returncode == 0, f"[{arch}] base run: exit {p.returncode}: {p.stderr[-600:]}")
    base = os.path.join(work, "base")
    p = ztrain("export", os.path.join(work, "full_ckpt"), "--format", "hf", "--dtype", "fp32", "--out", base)
    expect(p.returncode == 0, f"[{arch}] base export: exit {p.returncode}: {p.stderr[-600:]}")
    p = ztrain("export", os.path.join(work, "full_ckpt"), "--format", "peft", "--out", os.path.join(work, "nope"))
    expect(p.returncode == 2 and "not low-rank adapters" in p.stderr, f"[{arch}] --format peft of a whole model: "
                                                                       f"exit {p.returncode}: {p.stderr[-300:]}")
    # adapters over it
    ckpt = os.path.join(work, "ckpt")
    lora = spec("lora", model__init_from=base, checkpoint__dir=ckpt)
    p = ztrain("train", lora)
    expect(p.returncode == 0, f"[{arch}] LoRA run: exit {p.returncode}: {p.stderr[-600:]}")
    if p.returncode != 0:
        return

    # PEFT's format
    peft = os.path.join(work, "peft")
    p = ztrain("export", ckpt, "--format", "peft", "--out", peft)
    print(f"[{arch}] {p.stdout.strip()}")
    expect(p.returncode == 0, f"[{arch}] --format peft: exit {p.returncode}: {p.stderr[-600:]}")
    files = sorted(os.listdir(peft)) if os.path.isdir(peft) else []
    expect(files == ["adapter_config.json", "adapter_model.safetensors"], f"[{arch}] PEFT directory holds {files}")
    if files != ["adapter_config.json", "adapter_model.safetensors"]:
        return
    cfg = json.load(open(os.path.join(peft, "adapter_config.json")))
    want = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": RANK, "lora_alpha": ALPHA, "lora_dropout": 0.0,
            "bias": "none", "fan_in_fan_out": arch == "gpt2", "base_model_name_or_path": base, "use_dora": False,
            "use_rslora": False, "modules_to_save": None}
    for k, v in want.items():
        expect(cfg.get(k) == v, f"[{arch}] adapter_config.json: {k} = {cfg.get(k)!r}, PEFT's for this run: {v!r}")
    expect(set(cfg.get("target_modules", [])) == TARGETS[arch],
           f"[{arch}] target_modules {cfg.get('target_modules')}, expected {sorted(TARGETS[arch])}")
    adapters, meta = testlib.st_read(os.path.join(peft, "adapter_model.safetensors"))
    expect(meta.get("format") == "pt", f"[{arch}] adapter file metadata {meta}")
    n_layer = model["n_layer"]
    expect(len(adapters) == 2 * n_layer * len(TARGETS[arch]), f"[{arch}] {len(adapters)} adapter tensors")
    base_w, _ = testlib.st_read(os.path.join(base, "model.safetensors"))
    for name, a in adapters.items():
        ok = name.startswith("base_model.model.") and name.endswith((".lora_A.weight", ".lora_B.weight"))
        expect(ok, f"[{arch}] adapter tensor {name}: not PEFT's name")
        if not ok:
            continue
        module = name[len("base_model.model."):-len(".lora_A.weight")]
        w = base_w[module + ".weight"]
        out_f, in_f = (w.shape[1], w.shape[0]) if (module + ".weight").endswith(CONV1D) and arch == "gpt2" else w.shape
        shape = (RANK, in_f) if name.endswith(".lora_A.weight") else (out_f, RANK)
        expect(a.shape == shape, f"[{arch}] {name}: shape {a.shape}, PEFT's {shape}")

    # the merged model: base + alpha / r B A, a plain model with the adapter run's loss
    merged = os.path.join(work, "merged")
    p = ztrain("export", ckpt, "--format", "hf", "--merge-lora", "--dtype", "fp32", "--out", merged)
    print(f"[{arch}] {p.stdout.strip()}")
    expect(p.returncode == 0, f"[{arch}] --merge-lora: exit {p.returncode}: {p.stderr[-600:]}")
    p = ztrain("export", ckpt, "--format", "hf", "--out", os.path.join(work, "plain"))
    expect(p.returncode == 2 and "--format peft" in p.stderr and "--merge-lora" in p.stderr,
           f"[{arch}] plain --format hf of adapters: exit {p.returncode}: {p.stderr[-300:]}")
    if not os.path.exists(os.path.join(merged, "model.safetensors")):
        return
    got, _ = testlib.st_read(os.path.join(merged, "model.safetensors"))
    expect(sorted(got) == sorted(base_w), f"[{arch}] merged tensors {sorted(got)[:3]}... differ from the base's")
    worst, touched = 0.0, 0
    for name, w in base_w.items():
        module = name[:-len(".weight")]
        A = adapters.get(f"base_model.model.{module}.lora_A.weight")
        if A is None:
            expect(np.array_equal(got.get(name), w), f"[{arch}] {name} has no adapter but changed")
            continue
        B = adapters[f"base_model.model.{module}.lora_B.weight"]
        delta = (ALPHA / RANK) * (B.astype(np.float64) @ A.astype(np.float64))
        if name.endswith(CONV1D) and arch == "gpt2":
            delta = delta.T
        want_w = w.astype(np.float64) + delta
        e = float(np.linalg.norm(got[name] - want_w) / np.linalg.norm(want_w))
        worst, touched = max(worst, e), touched + 1
        expect(float(np.abs(delta).max()) > 0, f"[{arch}] {name}: the adapter never trained (B A = 0)")
    print(f"[{arch}] merged: {touched} weights = base + alpha/r B A within {worst:.1e}")
    expect(touched == n_layer * len(TARGETS[arch]) and worst < 1e-6, f"[{arch}] merged weights off by {worst:.2e}")
    with_adapters = loss_of(lora, "--set", f"checkpoint.init_from={ckpt}")
    plain = loss_of(spec("merged", False, model__init_from=merged))
    from_peft = loss_of(spec("from_peft", model__init_from=base, lora__init_from=peft))
    print(f"[{arch}] first-batch loss: adapters {with_adapters:.7f}, merged model {plain:.7f}, "
          f"PEFT directory as [lora] init_from {from_peft:.7f}")
    expect(abs(plain - with_adapters) <= 1e-5 * abs(with_adapters),
           f"[{arch}] the merged model's loss {plain} is not the adapter run's {with_adapters}")
    expect(abs(from_peft - with_adapters) <= 1e-6 * abs(with_adapters),
           f"[{arch}] [lora] init_from: loss {from_peft}, the adapter run's {with_adapters}")
    # a base of the same shapes that is not the one the adapters were trained on (the merged model)
    p = ztrain("export", ckpt, "--format", "hf", "--merge-lora", "--base", merged, "--out", os.path.join(work, "wrong"))
    expect(p.returncode == 2 and "is not the one" in p.stderr,
           f"[{arch}] --merge-lora over another base: exit {p.returncode}: {p.stderr[-300:]}")
    p = ztrain("train", spec("bad_rank", model__init_from=base, lora__init_from=peft, lora__rank=4))
    expect(p.returncode == 2 and "r = 2, but [lora] rank = 4" in p.stderr,
           f"[{arch}] PEFT adapters of another rank: exit {p.returncode}: {p.stderr[-300:]}")


if __name__ == "__main__":
    sys.exit(main())
