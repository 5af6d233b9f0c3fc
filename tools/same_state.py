#!/usr/bin/python3
"""Behaviour-unchanged check for refactors: two ztrain binaries (the one before a change and the
one after it) run `ztrain debug dump-state` on the same spec under a matrix of layouts, precisions,
offload tiers and both model families; every dump must hold the same bytes: the same datasets and
attributes, each bit-identical (HDF5 object headers carry modification times, so the files
themselves are compared object by object, not as one byte string).

  tools/same_state.py --old OLD/ztrain --new build/bin/ztrain --tokenize build/bin/ztrain-tokenize

An emulated-CUDA case runs when --old-cuda-plugin and --new-cuda-plugin are given. Prints one line
per case and exits 1 on the first difference, naming the dataset or attribute that differs.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import testlib  # noqa: E402

GPT2 = {"n_layer": 2, "n_head": 4, "d_model": 24, "vocab_size": 260, "seq_len": 16}
LLAMA = {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 24, "d_ff": 40,
         "vocab_size": 260, "seq_len": 16}

# (name, arch, ranks, --set overrides)
CASES = [
    ("gpt2_single_fp32", "gpt2", 1, []),
    ("gpt2_T2", "gpt2", 2, ["parallel.tensor=2"]),
    ("gpt2_D2_zero1", "gpt2", 2, ["parallel.zero_stage=1"]),
    ("gpt2_D2_zero2_fp16", "gpt2", 2, ["parallel.zero_stage=2", "precision.compute=fp16"]),
    ("gpt2_D2_zero3", "gpt2", 2, ["parallel.zero_stage=3"]),
    ("gpt2_T2_D2_zero3_bf16", "gpt2", 4, ["parallel.tensor=2", "parallel.zero_stage=3", "precision.compute=bf16"]),
    ("gpt2_single_bf16_recompute", "gpt2", 1, ["precision.compute=bf16", "train.recompute=full"]),
    ("gpt2_single_offload_cpu", "gpt2", 1, ["offload.optimizer=cpu"]),
    ("gpt2_D2_zero3_offload_cpu_params_cpu", "gpt2", 2,
     ["parallel.zero_stage=3", "offload.optimizer=cpu", "offload.params=cpu"]),
    # no clipping: each group's host AdamW runs during backward (the early update)
    ("gpt2_D2_zero2_offload_cpu_early_adamw", "gpt2", 2,
     ["parallel.zero_stage=2", "offload.optimizer=cpu", "optim.grad_clip=0"]),
    ("gpt2_D2_zero3_offload_nvme_bf16", "gpt2", 2,
     ["parallel.zero_stage=3", "precision.compute=bf16", "offload.optimizer=nvme", "offload.params=nvme"]),
    ("gpt2_single_zero1_fp16_nvme", "gpt2", 1, ["parallel.zero_stage=1", "precision.compute=fp16",
                                                 "offload.optimizer=nvme"]),
    ("gpt2_D2_zero3_nvme_params_cpu_fp16", "gpt2", 2,
     ["parallel.zero_stage=3", "precision.compute=fp16", "offload.optimizer=nvme", "offload.params=cpu"]),
    ("llama_D2_zero0_offload_cpu", "llama", 2, ["offload.optimizer=cpu"]),
    ("llama_single", "llama", 1, []),
    ("llama_T2_gqa", "llama", 2, ["parallel.tensor=2"]),
    ("llama_T4_replicated_kv_zero2", "llama", 4, ["parallel.tensor=4", "parallel.zero_stage=2"]),
    ("llama_D2_zero3_bf16", "llama", 2, ["parallel.zero_stage=3", "precision.compute=bf16"]),
    ("llama_tied_D2_zero3", "llama", 2, ["parallel.zero_stage=3", "model.tie_embeddings=true"]),
    ("llama_T2_D2_zero3_offload_cpu", "llama", 4,
     ["parallel.tensor=2", "parallel.zero_stage=3", "offload.optimizer=cpu", "offload.params=cpu"]),
]


def as_bytes(v):
    import numpy as np
    a = np.asarray(v)
    return (a.dtype.str, a.shape, a.tobytes())


def first_difference(a, b):
    """The first dataset or attribute whose dtype, shape or bytes differ; None when all agree."""
    import h5py
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        def objects(f):
            found = {"/": f}
            f.visititems(lambda n, o: found.__setitem__(n, o))
            return found
        oa, ob = objects(fa), objects(fb)
        if sorted(oa) != sorted(ob):
            return f"objects {sorted(set(oa) ^ set(ob))[:5]} are in one dump only"
        for n in sorted(oa):
            x, y = oa[n], ob[n]
            if isinstance(x, h5py.Dataset) != isinstance(y, h5py.Dataset):
                return f"{n} is a dataset in one dump only"
            if isinstance(x, h5py.Dataset) and as_bytes(x[()]) != as_bytes(y[()]):
                return f"dataset {n} differs"
            if sorted(x.attrs) != sorted(y.attrs):
                return f"attributes of {n} differ: {sorted(x.attrs)} vs {sorted(y.attrs)}"
            for k in x.attrs:
                if as_bytes(x.attrs[k]) != as_bytes(y.attrs[k]):
                    return f"attribute {n}@{k} differs"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--tokenize", required=True)
    ap.add_argument("--old-cuda-plugin")
    ap.add_argument("--new-cuda-plugin")
    ap.add_argument("--only", help="comma-separated case names")
    args = ap.parse_args()
    try:
        import h5py  # noqa: F401
    except ImportError as e:
        print(f"SKIP: h5py not available ({e})")
        return testlib.SKIP
    if not shutil.which("mpirun"):
        print("SKIP: mpirun not found")
        return testlib.SKIP
    cases = list(CASES)
    if args.old_cuda_plugin and args.new_cuda_plugin:
        # deterministic: the embedding's backward otherwise sums with atomics, in the order the
        # emulated device's worker threads happen to take its blocks (as a GPU's would)
        cases.append(("gpt2_emulated_cuda_bf16", "gpt2", 1,
                      ["run.device=cuda", "precision.compute=bf16", "run.deterministic=true"]))
        cases.append(("llama_emulated_cuda_fp32", "llama", 1, ["run.device=cuda", "run.deterministic=true"]))
    if args.only:
        keep = set(args.only.split(","))
        cases = [c for c in cases if c[0] in keep]
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 9)
        nvme = os.path.join(work, "nvme")
        os.makedirs(nvme)
        for name, arch, ranks, sets in cases:
            spec = os.path.join(work, f"{name}.toml")
            testlib.write_spec(spec, {
                "run": {"out_dir": os.path.join(work, "run"), "seed": 11, "device": "cpu", "threads": 1},
                "model": GPT2 if arch == "gpt2" else LLAMA,
                "train": {"micro_batch": 2, "global_batch": 8, "max_steps": 6, "log_every": 1},
                "optim": {"lr": 4e-3, "warmup_steps": 2, "grad_clip": 0.5},
                "parallel": {"bucket_mb": 0.004, "prefetch": 2},
                "offload": {"nvme_path": nvme, "buffer_mb": 0.0625, "io_depth": 3},
                "data": {"train": data},
            })
            outs = []
            for which, binary, plugin in (("old", args.old, args.old_cuda_plugin), ("new", args.new, args.new_cuda_plugin)):
                out = os.path.join(work, f"{name}.{which}.h5")
                argv = [binary, "debug", "dump-state", spec, "--out", out, "--steps", "6"]
                for s in sets:
                    argv += ["--set", s]
                env = testlib.mpi_env(**({"ZTRAIN_CUDA_PLUGIN": plugin} if plugin else {}))
                p = subprocess.run([*testlib.mpirun(ranks), *argv], capture_output=True, text=True, env=env,
                                   timeout=600)
                if p.returncode != 0:
                    print(f"FAIL {name}: the {which} binary exited {p.returncode}: {p.stderr[-1500:]}")
                    return 1
                outs.append(out)
            diff = first_difference(*outs)
            if diff:
                print(f"FAIL {name}: the dumps differ: {diff}")
                return 1
            print(f"same {name}: {os.path.getsize(outs[1])} bytes, {ranks} rank(s), {' '.join(sets) or 'defaults'}")
    print(f"PASS: {len(cases)} cases byte-identical between {args.old} and {args.new}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
