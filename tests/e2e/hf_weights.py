#!/usr/bin/python3
"""Hugging Face weights in and out, for GPT-2 and Llama, on the CPU backend:
- `ztrain export CHECKPOINT --format hf` writes model.safetensors and config.json that this test
  reads with its own parser (8-byte length, JSON header, numpy bytes): Hugging Face names, GPT-2's
  Conv1D weights transposed to (in, out), metadata {"format": "pt"}, fp32 values equal to the
  checkpoint's and bf16 / fp16 values equal to them rounded to nearest even; above --max-file-size
  the export is split with model.safetensors.index.json;
- [model] init_from = that directory (single file or split) starts a run whose parameters equal the
  exported ones exactly, single process and under mpirun with tensor parallelism or ZeRO-3
  (resharded), the model's shape read from config.json;
- weights written by this test's own writer with Hugging Face names (GPT-2 sharded in two files
  with an index, with the causal-mask buffers older transformers saved and more positions than the
  run uses; Llama with grouped-query attention) load, and ztrain's first-step loss on them equals
  the PyTorch reference's on the same weights (relative difference <= 1e-5);
- bad input exits 2 with one message: a spec key that disagrees with config.json (Llama and GPT-2
  names), a header that is
  not JSON, offsets outside the file, a dtype ztrain does not read, a tensor of the wrong shape, a
  missing tensor, a config ztrain cannot build.
"""
import json
import os
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

h5py, np, torch, torch_gpt, torch_llama = testlib.require("h5py", "numpy", "torch", "torch_gpt", "torch_llama",
                                                         what="PyTorch/h5py", hint="install python3-torch python3-h5py")
GPT, Llama = torch_gpt.GPT, torch_llama.Llama
failures, expect = testlib.checks()
CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")


# ---- the test's own safetensors reader and writer (independent of ztrain's)
st_read = testlib.st_read


def st_write(path, tensors, header_patch=None):
    """tensors: {name: float32 array}, written as F32; header_patch(header) may break it."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    if header_patch:
        header_patch(header)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def bf16_round(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32)).view(np.float32)


def read_dir(d):
    """Every tensor of an exported directory (single file or split)."""
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    out = {}
    for f in files:
        t, meta = st_read(os.path.join(d, f))
        expect(meta.get("format") == "pt", f"{d}/{f}: metadata {meta}, Hugging Face needs format pt")
        out.update(t)
    return out


MODELS = {
    "gpt2": {"n_layer": 2, "n_head": 2, "d_model": 16, "vocab_size": 260, "seq_len": 24},
    # with Llama 3.1's RoPE scaling: the export writes it as the Hub's files spell it, and init_from
    # reads it back
    "llama": {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 24, "d_ff": 40,
              "vocab_size": 260, "seq_len": 24, "rope_scaling": "llama3", "rope_scaling_factor": 8.0,
              "rope_scaling_original_max_positions": 64},
}


def spec_for(work, name, data, model, **over):
    return testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, name), data, model,
                             {"micro_batch": 2, "global_batch": 2, "max_steps": 3, "log_every": 1},
                             optim={"lr": 3e-3, "warmup_steps": 0}, seed=5, threads=2, **over)


def ztrain(args, argv, np_=1, check=True):
    env = testlib.mpi_env() if np_ > 1 else None
    p = testlib.run([*testlib.mpirun(np_), args.ztrain, *argv], check=False, env=env)
    if check and p.returncode != 0:
        failures.append(f"ztrain {' '.join(argv)}: exit {p.returncode}: {p.stderr[-1500:]}")
    return p


def export_and_reload(args, work, data, arch):
    model = MODELS[arch]
    ck = os.path.join(work, arch + "_ckpt")
    spec = spec_for(work, arch + "_train", data, model, checkpoint__dir=ck)
    if ztrain(args, ["train", spec]).returncode != 0:
        return
    step = os.path.join(ck, "step_00000003")
    params = {n: f[()] for n, f in h5py.File(os.path.join(step, "checkpoint.h5"), "r")["params"].items()}
    out32, out16 = os.path.join(work, arch + "_hf32"), os.path.join(work, arch + "_hf16")
    p = ztrain(args, ["export", step, "--format", "hf", "--out", out32, "--dtype", "fp32"])
    print(f"[{arch}] {p.stdout.strip()}")
    hf = read_dir(out32)
    config = json.load(open(os.path.join(out32, "config.json")))
    expect(sorted(hf) == sorted(params), f"[{arch}] exported tensors {sorted(hf)} vs checkpoint {sorted(params)}")
    for n, v in params.items():
        want = v.T if arch == "gpt2" and n.endswith(CONV1D) else v
        expect(n in hf and hf[n].shape == want.shape and np.array_equal(hf[n], want),
               f"[{arch}] exported {n} differs from the checkpoint's (Hugging Face layout)")
    expect(config["model_type"] == arch and config["vocab_size"] == 260,
           f"[{arch}] config.json: {config}")
    if arch == "llama":
        expect(config["num_key_value_heads"] == 2 and config["tie_word_embeddings"] is False
               and config["architectures"] == ["LlamaForCausalLM"], f"[llama] config.json: {config}")
        expect(config.get("rope_scaling") == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
               f"[llama] config.json's rope_scaling: {config.get('rope_scaling')}")
    else:
        expect(config["n_embd"] == 16 and config["architectures"] == ["GPT2LMHeadModel"], f"[gpt2] config.json: {config}")
    # bf16, split into files of at most 16 KiB
    ztrain(args, ["export", step, "--format", "hf", "--out", out16, "--dtype", "bf16", "--max-file-size", "16KiB"])
    index = os.path.join(out16, "model.safetensors.index.json")
    expect(os.path.exists(index), f"[{arch}] a 16 KiB limit wrote no index: {os.listdir(out16)}")
    if os.path.exists(index):
        wm = json.load(open(index))["weight_map"]
        nfiles = len(set(wm.values()))
        expect(nfiles > 1 and sorted(wm) == sorted(params), f"[{arch}] index: {nfiles} files, {sorted(wm)}")
        sizes = [os.path.getsize(os.path.join(out16, f)) for f in set(wm.values())]
        print(f"[{arch}] bf16 export split into {nfiles} files ({min(sizes)}..{max(sizes)} bytes)")
    hf16 = read_dir(out16)
    for n, v in params.items():
        want = bf16_round(v.T if arch == "gpt2" and n.endswith(CONV1D) else v)
        expect(n in hf16 and np.array_equal(hf16[n], want), f"[{arch}] bf16 export of {n} is not the rounded master")
    # fp16: the masters rounded to nearest even (numpy's float16 cast)
    out_h = os.path.join(work, arch + "_hf_fp16")
    ztrain(args, ["export", step, "--format", "hf", "--out", out_h, "--dtype", "fp16"])
    hdr = json.loads(open(os.path.join(out_h, "model.safetensors"), "rb").read()[8:][:struct.unpack(
        "<Q", open(os.path.join(out_h, "model.safetensors"), "rb").read(8))[0]])
    expect(all(t["dtype"] == "F16" for n, t in hdr.items() if n != "__metadata__"), f"[{arch}] fp16 export dtypes")
    hfh = read_dir(out_h)
    for n, v in params.items():
        want = (v.T if arch == "gpt2" and n.endswith(CONV1D) else v).astype(np.float16).astype(np.float32)
        expect(n in hfh and np.array_equal(hfh[n], want), f"[{arch}] fp16 export of {n} is not the rounded master")
    # exporting again into a directory that holds a split export: the old files go (a loader
    # would otherwise take the stale index)
    again = os.path.join(work, arch + "_again")
    shutil.copytree(out16, again)
    ztrain(args, ["export", step, "--format", "hf", "--out", again, "--dtype", "fp32"])
    left = sorted(f for f in os.listdir(again) if f.endswith((".safetensors", ".json")))
    expect(left == ["config.json", "model.safetensors"], f"[{arch}] re-export left {left}")
    # init_from: the model's shape from config.json (the spec gives no model keys but seq_len)
    for src, want_of, np_, tensor, zero in [(out32, lambda v: v, 1, 1, 0), (out32, lambda v: v, 2, 2, 0),
                                            (out16, bf16_round, 1, 1, 0), (out16, bf16_round, 2, 1, 3)]:
        name = f"{arch}_init_{os.path.basename(src)}_T{tensor}_Z{zero}"
        spec = spec_for(work, name, data, {"init_from": src, "seq_len": model["seq_len"]},
                        parallel__tensor=tensor, parallel__zero_stage=zero, train__global_batch=2 * np_ // tensor)
        h5 = os.path.join(work, name + ".h5")
        if ztrain(args, ["debug", "dump-state", spec, "--out", h5], np_=np_).returncode != 0:
            continue
        got = h5py.File(h5, "r")["params"]
        bad = [n for n, v in params.items() if not np.array_equal(got[n][()], want_of(v))]
        expect(not bad, f"[{name}] parameters differ from the exported ones: {bad}")
        print(f"[{name}] init_from on {np_} rank(s), tensor {tensor}, ZeRO {zero}: {len(params)} tensors equal "
              f"the export")


# Llama 3.1's RoPE scaling as its Hub files give it (head size 6 at theta 500: wavelengths 6.3,
# 49.8 and 395 positions, one in each band for an original context of 64)
LLAMA31_SCALING = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


def own_writer(args, work, data, arch, hub_layout=False, rope=None):
    """Weights from this test's writer with Hugging Face names: ztrain's first loss = PyTorch's.
    hub_layout (GPT-2): the names of the Hub's published `gpt2` (no `transformer.` prefix) with its
    causal-mask buffers `h.N.attn.bias` and `h.N.attn.masked_bias`, in one file. rope (Llama):
    Llama 3.1's scaling in transformers v4's spelling ("v4": rope_scaling with rope_type) or v5's
    ("v5": rope_parameters holding rope_theta too)."""
    rng = np.random.default_rng(7)
    arch_dir = arch + ("_hub" if hub_layout else "") + (f"_rope_{rope}" if rope else "")
    d = os.path.join(work, arch_dir + "_own")
    os.makedirs(d)
    if arch == "gpt2":
        L, NH, C, V, NPOS, T = 2, 2, 16, 260, 40, 24  # the file has more positions than the run uses
        config = {"model_type": "gpt2", "n_layer": L, "n_head": NH, "n_embd": C, "vocab_size": V,
                  "n_positions": NPOS, "n_inner": None, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
        ref = GPT(L, NH, C, 4 * C, V, T)
    else:
        L, NH, NKV, C, F, V, T = 2, 6, 2, 36, 50, 260, 24
        config = {"model_type": "llama", "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV,
                  "hidden_size": C, "intermediate_size": F, "vocab_size": V, "max_position_embeddings": 64,
                  "rms_norm_eps": 1e-6, "rope_theta": 500.0, "tie_word_embeddings": False, "hidden_act": "silu"}
        if rope == "v4":
            config["rope_scaling"] = {"rope_type": "llama3", **LLAMA31_SCALING}
        elif rope == "v5":
            del config["rope_theta"]
            config["rope_parameters"] = {"rope_type": "llama3", "rope_theta": 500.0, **LLAMA31_SCALING}
        ref = Llama(L, NH, NKV, C, F, V, 500.0, 1e-6, False, LLAMA31_SCALING if rope else None)
    tensors = {}
    with torch.no_grad():
        for n, p in ref.named_parameters():
            v = rng.normal(0, 0.05, p.shape).astype(np.float32)
            if n.endswith("norm.weight") or ".ln_" in n or "ln_f" in n or "layernorm" in n:
                v = (1 + v).astype(np.float32) if n.endswith("weight") else v
            if n == "transformer.wpe.weight":
                v = rng.normal(0, 0.05, (NPOS, C)).astype(np.float32)
                p.copy_(torch.from_numpy(v[:T]))
            else:
                p.copy_(torch.from_numpy(v))
            tensors[n] = v.T.copy() if arch == "gpt2" and n.endswith(CONV1D) else v
    if arch == "gpt2":  # buffers older transformers versions saved: ignored
        for layer in range(L):
            tensors[f"transformer.h.{layer}.attn.bias"] = np.tril(np.ones((1, 1, NPOS, NPOS), np.float32))
    if hub_layout:
        tensors = {n[len("transformer."):] if n.startswith("transformer.") else n: v for n, v in tensors.items()}
        for layer in range(L):
            tensors[f"h.{layer}.attn.masked_bias"] = np.array(-1e4, np.float32)
        st_write(os.path.join(d, "model.safetensors"), tensors)
    elif arch == "gpt2":  # a sharded directory, as large checkpoints are published: two files and the index
        names = list(tensors)
        parts = {"model-00001-of-00002.safetensors": names[:len(names) // 2],
                 "model-00002-of-00002.safetensors": names[len(names) // 2:]}
        for fname, part in parts.items():
            st_write(os.path.join(d, fname), {n: tensors[n] for n in part})
        json.dump({"metadata": {}, "weight_map": {n: f for f, part in parts.items() for n in part}},
                  open(os.path.join(d, "model.safetensors.index.json"), "w"))
    else:
        st_write(os.path.join(d, "model.safetensors"), tensors)
    json.dump(config, open(os.path.join(d, "config.json"), "w"))
    spec = spec_for(work, arch_dir + "_own_run", data, {"init_from": d, "seq_len": T})
    h5 = os.path.join(work, arch_dir + "_own.h5")
    if ztrain(args, ["debug", "dump-state", spec, "--out", h5]).returncode != 0:
        return d
    f = h5py.File(h5, "r")
    x = torch.from_numpy(f["batch"]["inputs"][()]).long()
    y = torch.from_numpy(f["batch"]["targets"][()]).long()
    with torch.no_grad():
        want = ref(x, y).item()
    got = float(f["out"]["loss"][()])
    e = abs(got - want) / want
    print(f"[{arch_dir}] weights from the test's own writer: first loss ztrain {got:.7f} PyTorch {want:.7f} (rel {e:.1e})")
    expect(e <= 1e-5, f"[{arch_dir}] own-writer weights: loss ztrain {got} vs PyTorch {want} (rel {e:.1e})")
    return d


def bad_inputs(args, work, data, good, good_gpt2):
    """good: the Llama directory of own_writer. Each case copies it and breaks one thing."""
    cases = []

    def variant(name, patch_header=None, config_patch=None, drop=None, reshape=None):
        d = os.path.join(work, "bad_" + name)
        shutil.copytree(good, d)
        tensors, _ = st_read(os.path.join(good, "model.safetensors"))
        if drop:
            del tensors[drop]
        if reshape:
            tensors[reshape] = tensors[reshape][:-1]
        st_write(os.path.join(d, "model.safetensors"), tensors, patch_header)
        if config_patch:
            c = json.load(open(os.path.join(d, "config.json")))
            c.update(config_patch)
            json.dump(c, open(os.path.join(d, "config.json"), "w"))
        return d

    q = "model.layers.0.self_attn.q_proj.weight"
    cases.append(("offsets outside the file", variant(
        "offsets", lambda h: h[q].update(data_offsets=[h[q]["data_offsets"][0], 10 ** 9])), "outside the"))
    cases.append(("a dtype ztrain does not read", variant("dtype", lambda h: h[q].update(dtype="I64")),
                  "dtype I64 is not supported"))
    cases.append(("a wrong shape", variant("shape", reshape=q), f"tensor {q} has shape (35, 36), this model's is (36, 36)"))
    cases.append(("a missing tensor", variant("missing", drop="model.norm.weight"), "no tensor model.norm.weight"))
    cases.append(("rope scaling", variant("rope", config_patch={"rope_scaling": {"type": "linear", "factor": 2.0}}),
                  'rope_scaling.rope_type = "linear" is not supported'))
    cases.append(("yarn rope scaling", variant("yarn", config_patch={"rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}}),
        'rope_scaling.rope_type = "yarn" is not supported'))
    cases.append(("llama3 scaling with a field ztrain does not read", variant("rope_extra", config_patch={
        "rope_scaling": {"rope_type": "llama3", **LLAMA31_SCALING, "attention_factor": 2.0}}),
        "rope_scaling.attention_factor = 2.0 is not a field"))
    # a GPT-2 with its own head (tie_word_embeddings false): refused, never loaded with the tied head
    untied = os.path.join(work, "bad_untied_gpt2")
    shutil.copytree(good_gpt2, untied)
    index_path = os.path.join(untied, "model.safetensors.index.json")  # own_writer's GPT-2 is split
    index = json.load(open(index_path))
    wte = next(k for k in index["weight_map"] if k.endswith("wte.weight"))
    tensors, _ = st_read(os.path.join(untied, index["weight_map"][wte]))
    st_write(os.path.join(untied, "model-head.safetensors"), {"lm_head.weight": tensors[wte] + 1})
    index["weight_map"]["lm_head.weight"] = "model-head.safetensors"
    json.dump(index, open(index_path, "w"))
    c = json.load(open(os.path.join(untied, "config.json")))
    c["tie_word_embeddings"] = False
    json.dump(c, open(os.path.join(untied, "config.json"), "w"))
    cases.append(("an untied GPT-2 head", untied, "tie_word_embeddings = false"))
    garbage = os.path.join(work, "bad_garbage")
    shutil.copytree(good, garbage)
    with open(os.path.join(garbage, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", 9) + b"{not json" + bytes(16))
    cases.append(("a header that is not JSON", garbage, "the safetensors header is not JSON"))
    for what, d, needle in cases:
        spec = spec_for(work, "bad", data, {"init_from": d, "seq_len": 24})
        p = ztrain(args, ["train", spec], check=False)
        expect(p.returncode == 2 and needle in p.stderr,
               f"{what}: expected exit 2 with {needle!r}, got {p.returncode}: {p.stderr[-600:]}")
        print(f"{what}: exit {p.returncode}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}")
    # a spec key that disagrees with config.json names both values
    spec = spec_for(work, "disagree", data, {"init_from": good, "seq_len": 24, "n_layer": 3})
    p = ztrain(args, ["check", spec], check=False)
    expect(p.returncode == 2 and "[model] n_layer = 3 disagrees with" in p.stderr
           and "config.json: num_hidden_layers = 2" in p.stderr, f"disagreeing n_layer: {p.returncode} {p.stderr[-600:]}")
    spec = spec_for(work, "disagree_gpt2", data, {"init_from": good_gpt2, "seq_len": 24, "d_model": 32})
    p = ztrain(args, ["check", spec], check=False)
    expect(p.returncode == 2 and "[model] d_model = 32 disagrees with" in p.stderr and "n_embd = 16" in p.stderr,
           f"disagreeing d_model (GPT-2): {p.returncode} {p.stderr[-600:]}")
    spec = spec_for(work, "too_long", data, {"init_from": good, "seq_len": 100})
    p = ztrain(args, ["check", spec], check=False)
    expect(p.returncode == 2 and "seq_len = 100 exceeds" in p.stderr, f"seq_len beyond the positions: {p.stderr[-600:]}")


def main():
    args = testlib.arg_parser().parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 4000, 3)
        own = {}
        for arch in ("gpt2", "llama"):
            export_and_reload(args, work, data, arch)
            own[arch] = own_writer(args, work, data, arch)
        own_writer(args, work, data, "gpt2", hub_layout=True)  # the Hub's published GPT-2 layout
        for rope in ("v4", "v5"):  # Llama 3.1's RoPE scaling in both spellings
            own_writer(args, work, data, "llama", rope=rope)
        bad_inputs(args, work, data, own["llama"], own["gpt2"])
    return testlib.report(failures, "Hugging Face safetensors out (fp32, bf16, fp16, split) and in (resharded, "
                                    "sharded files), "
                                    "losses on foreign weights equal PyTorch's, bad files exit 2")


if __name__ == "__main__":
    sys.exit(main())
