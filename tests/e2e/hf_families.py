#!/usr/bin/python3
"""The Llama-shaped families people fine-tune, from and to Hugging Face files (issue 49), on the CPU
backend:
- weights written by this test's own writer (numpy + the safetensors format, tests/e2e/hf_weights.py)
  under each family's published tensor names, with config.json as the family's Hub files spell it
  (Qwen2.5's unused sliding window, Qwen3's head_dim and attention_bias, Mistral's null
  sliding_window, and transformers v5's rope_parameters and layer_types for Qwen3), load through
  [model] init_from; ztrain's first loss and every gradient equal those of a PyTorch reference
  written from the family's modeling file (tests/torch_llama.py) on the same weights, in one
  process and under tensor 2 x ZeRO-3 (the loss);
- `ztrain export --format hf` of a run of each family writes the family's class, model_type and
  fields, the tensors under the same names, and init_from that export starts from them exactly;
- a config.json with a key ztrain does not build (a sliding window in use, Mistral v0.1's window,
  Qwen3 with attention biases, a sliding layer in layer_types, yarn scaling) exits 2 naming it.
"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import testlib  # noqa: E402

h5py, np, torch, torch_llama = testlib.require("h5py", "numpy", "torch", "torch_llama",
                                               what="PyTorch/h5py", hint="install python3-torch python3-h5py")
import hf_weights  # noqa: E402  (its safetensors reader and writer, spec and ztrain runner, and failure list)

failures, expect, ztrain, spec_for = hf_weights.failures, hf_weights.expect, hf_weights.ztrain, hf_weights.spec_for

# Each family at a small shape in its Hub layout: config.json's fields as the published files
# carry them (Qwen2.5-0.5B, Qwen3-0.6B, Mistral-7B-v0.3 / Nemo), the sizes made small and awkward.
FAMILIES = {
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_dropout": 0.0,
              "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 36,
              "initializer_range": 0.02, "intermediate_size": 50, "max_position_embeddings": 64,
              "max_window_layers": 1, "num_attention_heads": 6, "num_hidden_layers": 2, "num_key_value_heads": 2,
              "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 64, "tie_word_embeddings": True,
              "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": True,
              "use_sliding_window": False, "vocab_size": 260},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
              "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 10,
              "hidden_act": "silu", "hidden_size": 24, "initializer_range": 0.02, "intermediate_size": 40,
              "max_position_embeddings": 64, "max_window_layers": 2, "num_attention_heads": 4,
              "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_scaling": None,
              "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
              "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 260},
    "mistral": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "attention_dropout": 0.0,
                "bos_token_id": 1, "eos_token_id": 2, "head_dim": 12, "hidden_act": "silu", "hidden_size": 32,
                "initializer_range": 0.02, "intermediate_size": 48, "max_position_embeddings": 64,
                "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-05,
                "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False,
                "torch_dtype": "bfloat16", "transformers_version": "4.42.0.dev0", "use_cache": True,
                "vocab_size": 260},
}
T = 24  # the runs' seq_len


def v5_spelling(config):
    """transformers v5's spelling of the same file: rope_parameters holds rope_theta, and
    layer_types each layer's attention."""
    c = dict(config)
    c["rope_parameters"] = {"rope_type": "default", "rope_theta": c.pop("rope_theta")}
    c.pop("rope_scaling", None)
    c["layer_types"] = ["full_attention"] * c["num_hidden_layers"]
    return c


def reference(family, c):
    return torch_llama.Llama(c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"],
                             c["hidden_size"], c["intermediate_size"], c["vocab_size"],
                             float(c.get("rope_theta", c.get("rope_parameters", {}).get("rope_theta"))),
                             c["rms_norm_eps"], c["tie_word_embeddings"], None, head_dim=c.get("head_dim"),
                             qkv_bias=family == "qwen2", qk_norm=family == "qwen3")


def own_writer(args, work, data, family, config, tag):
    """The family's weights from this test's writer: ztrain's first loss and gradients = PyTorch's."""
    rng = np.random.default_rng(11)
    d = os.path.join(work, f"{family}_{tag}_own")
    os.makedirs(d)
    ref = reference(family, config)
    tensors = {}
    with torch.no_grad():
        for n, p in ref.named_parameters():
            v = rng.normal(0, 0.05, p.shape).astype(np.float32)
            if n.endswith("norm.weight"):  # every norm, the q/k ones included: weights around 1
                v = (1 + 4 * v).astype(np.float32)
            p.copy_(torch.from_numpy(v))
            tensors[n] = v
    hf_weights.st_write(os.path.join(d, "model.safetensors"), tensors)
    json.dump(config, open(os.path.join(d, "config.json"), "w"), indent=2)
    for np_, tensor, zero in ((1, 1, 0), (2, 2, 3)):
        name = f"{family}_{tag}_T{tensor}_Z{zero}"
        spec = spec_for(work, name, data, {"init_from": d, "seq_len": T}, parallel__tensor=tensor,
                        parallel__zero_stage=zero)
        h5 = os.path.join(work, name + ".h5")
        if ztrain(args, ["debug", "dump-state", spec, "--out", h5], np_=np_).returncode != 0:
            continue
        f = h5py.File(h5, "r")
        x = torch.from_numpy(f["batch"]["inputs"][()]).long()
        y = torch.from_numpy(f["batch"]["targets"][()]).long()
        ref.zero_grad()
        loss = ref(x, y)
        loss.backward()
        got = float(f["out"]["loss"][()])
        e = abs(got - loss.item()) / loss.item()
        expect(e <= 1e-5, f"[{name}] loss ztrain {got} vs PyTorch {loss.item()} (rel {e:.1e})")
        expect(sorted(f["grads"].keys()) == sorted(tensors), f"[{name}] gradients of {sorted(f['grads'].keys())}")
        worst = (0.0, "")
        for n, p in ref.named_parameters():
            if n in f["grads"]:
                g = torch.from_numpy(f["grads"][n][()])
                worst = max(worst, (((g - p.grad).norm() / p.grad.norm()).item(), n))
        expect(worst[0] <= 1e-4, f"[{name}] gradient of {worst[1]}: rel err {worst[0]:.1e}")
        print(f"[{name}] {np_} rank(s), tensor {tensor}, ZeRO {zero}: first loss ztrain {got:.7f} PyTorch "
              f"{loss.item():.7f} (rel {e:.1e}), worst gradient rel err {worst[0]:.1e} ({worst[1]})")
    return d


def export_round_trip(args, work, data, family, own):
    """Train from the family's weights, export, and read the export back."""
    ck = os.path.join(work, family + "_ckpt")
    spec = spec_for(work, family + "_train", data, {"init_from": own, "seq_len": T}, checkpoint__dir=ck)
    if ztrain(args, ["train", spec]).returncode != 0:
        return
    step = os.path.join(ck, "step_00000003")
    params = {n: f[()] for n, f in h5py.File(os.path.join(step, "checkpoint.h5"), "r")["params"].items()}
    out = os.path.join(work, family + "_export")
    p = ztrain(args, ["export", step, "--format", "hf", "--out", out, "--dtype", "fp32"])
    print(f"[{family}] {p.stdout.strip()}")
    hf = hf_weights.read_dir(out)
    expect(sorted(hf) == sorted(params) and all(np.array_equal(hf[n], v) for n, v in params.items()),
           f"[{family}] exported tensors differ from the checkpoint's")
    c = json.load(open(os.path.join(out, "config.json")))
    src = FAMILIES[family]
    want = {"architectures": src["architectures"], "model_type": family, "head_dim": src.get("head_dim", 6),
            "tie_word_embeddings": src["tie_word_embeddings"], "num_key_value_heads": src["num_key_value_heads"],
            "rope_theta": float(src["rope_theta"]), "sliding_window": None}
    if family.startswith("qwen"):
        want.update(use_sliding_window=False, max_window_layers=src["num_hidden_layers"])
    if family == "qwen3":
        want.update(attention_bias=False)
    bad = {k: c.get(k, "(missing)") for k, v in want.items() if c.get(k, "(missing)") != v}
    expect(not bad, f"[{family}] exported config.json: {bad}, want {want}")
    name = family + "_from_export"
    h5 = os.path.join(work, name + ".h5")
    if ztrain(args, ["debug", "dump-state", spec_for(work, name, data, {"init_from": out, "seq_len": T}),
                     "--out", h5]).returncode == 0:
        got = h5py.File(h5, "r")["params"]
        diff = [n for n, v in params.items() if not np.array_equal(got[n][()], v)]
        expect(not diff, f"[{name}] parameters differ from the export: {diff}")
        print(f"[{name}] config.json as {src['architectures'][0]}; init_from the export: {len(params)} tensors equal")


def refusals(args, work, data, own):
    cases = [("qwen2", {"use_sliding_window": True}, "sliding_window = 64 with use_sliding_window = true"),
             ("mistral", {"sliding_window": 4096}, "sliding_window = 4096 is not supported"),
             ("qwen3", {"attention_bias": True}, "attention_bias / mlp_bias: ztrain's qwen3 has no biases"),
             ("qwen3", {"layer_types": ["full_attention", "sliding_attention"]}, "layer_types = "),
             ("qwen2", {"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}},
              'rope_scaling.rope_type = "yarn" is not supported'),
             ("qwen2", {"mlp_bias": True}, "mlp_bias = true is not a field")]
    for family, patch, needle in cases:
        d = os.path.join(work, f"bad_{family}_{'_'.join(patch)}")
        shutil.copytree(own[family], d)
        c = json.load(open(os.path.join(d, "config.json")))
        c.update(patch)
        json.dump(c, open(os.path.join(d, "config.json"), "w"))
        p = ztrain(args, ["check", spec_for(work, "bad", data, {"init_from": d, "seq_len": T})], check=False)
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        expect(p.returncode == 2 and needle in p.stderr, f"{family} {patch}: expected exit 2 with {needle!r}, got "
                                                         f"{p.returncode}: {p.stderr[-600:]}")
        print(f"{family} with {patch}: exit {p.returncode}: {last}")


def main():
    args = testlib.arg_parser().parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 4000, 3)
        own = {}
        for family, config in FAMILIES.items():
            own[family] = own_writer(args, work, data, family, config, "v4")
            export_round_trip(args, work, data, family, own[family])
        own_writer(args, work, data, "qwen3", v5_spelling(FAMILIES["qwen3"]), "v5")
        refusals(args, work, data, own)
    return testlib.report(failures, "Qwen2, Qwen3 and Mistral files load (v4 and v5 spellings) with PyTorch's loss "
                                    "and gradients on one rank and tensor 2 x ZeRO-3, export in each family's "
                                    "spelling and read back, and keys ztrain does not build exit 2")


if __name__ == "__main__":
    sys.exit(main())
