#!/usr/bin/python3
"""The optimizer step under [offload] on this machine, as ratios measured in one run:
- optimizer "cpu": the step's time vs the same model's on-device step. On the CPU backend both run
  the same AdamW kernel; the difference is the offload's extra passes over memory (the gradient
  copied to the host, the compute copy written and uploaded), which on a GPU are the PCIe
  transfers;
- optimizer "nvme": the bytes the step streams (masters and both moments read and written:
  24 bytes per parameter) per second of the step, vs `dd` with O_DIRECT reading and writing the
  same number of bytes in the same directory (the disk's own rate; goal: near 1, the AdamW math
  hidden under the I/O);
- optimizer "cpu" at ZeRO-2 without clipping: the whole step with each layer's host AdamW running
  during backward vs the same step with it after backward.
The forward and backward are kept cheap (micro_batch 1, seq_len 16) so the optimizer dominates.
Usage: bench/offload.py [--n_layer 8 --d_model 512] [--dir /path/on/the/ssd]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import testlib  # noqa: E402


def opt_ms(out_dir):
    """Median milliseconds of the optimizer plus the offload transfers and I/O waits (the step
    breakdown puts those apart) of the steps after the first."""
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        rows = [r for r in map(json.loads, f) if r.get("kind") == "train"]
    return statistics.median(r["optimizer_ms"] + r["offload_ms"] for r in rows[1:])


def dd_rate(directory, nbytes):
    """Bytes per second of dd writing then reading nbytes with O_DIRECT (1 MiB blocks)."""
    path = os.path.join(directory, "dd.bin")
    count = max(1, nbytes // 1048576)
    t0 = time.time()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={count}", "oflag=direct"],
                   check=True, capture_output=True)
    subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=1M", "iflag=direct"], check=True, capture_output=True)
    dt = time.time() - t0
    os.remove(path)
    return 2 * count * 1048576 / dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ztrain", default=os.path.join(HERE, "..", "build", "bin", "ztrain"))
    ap.add_argument("--tokenize", default=os.path.join(HERE, "..", "build", "bin", "ztrain-tokenize"))
    ap.add_argument("--n_layer", type=int, default=8)
    ap.add_argument("--d_model", type=int, default=512)
    ap.add_argument("--dir", default=None, help="directory for the NVMe tier (default: a temporary one)")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="zt_offload_bench_")
    nvme = args.dir or os.path.join(work, "nvme")
    os.makedirs(nvme, exist_ok=True)
    try:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 3)
        results = {}
        for mode in ("none", "cpu", "nvme"):
            out = os.path.join(work, mode)
            spec = os.path.join(work, mode + ".toml")
            testlib.write_spec(spec, {
                "run": {"out_dir": out, "seed": 1, "device": "cpu", "threads": 0, "telemetry_s": 0},
                "model": {"n_layer": args.n_layer, "n_head": 8, "d_model": args.d_model, "vocab_size": 260,
                          "seq_len": 16},
                "train": {"micro_batch": 1, "global_batch": 1, "max_steps": args.steps, "log_every": 1},
                "parallel": {"zero_stage": 1},
                "offload": {"optimizer": mode, "nvme_path": nvme},
                "data": {"train": data}})
            p = testlib.run([args.ztrain, "train", spec], check=False)
            if p.returncode != 0:
                print(f"{mode}: exit {p.returncode}: {p.stderr[-800:]}")
                return 1
            results[mode] = opt_ms(out)
            n_params = float([line for line in p.stderr.splitlines() if "M parameters" in line][0]
                             .split("M parameters")[0].rsplit(" ", 1)[-1]) * 1e6
        # the host AdamW during backward (ZeRO-2, no clipping) vs after it (clipping at a norm never
        # reached: the same arithmetic), whole step times, one thread for the model's backend so the
        # AdamW thread has a core of its own
        steps = {}
        for name, clip in (("during", 0), ("after", 1e9)):
            out = os.path.join(work, "early_" + name)
            spec = os.path.join(work, "early_" + name + ".toml")
            testlib.write_spec(spec, {
                "run": {"out_dir": out, "seed": 1, "device": "cpu", "threads": 1, "telemetry_s": 0},
                "model": {"n_layer": args.n_layer, "n_head": 8, "d_model": args.d_model, "vocab_size": 260,
                          "seq_len": 64},
                "train": {"micro_batch": 2, "global_batch": 2, "max_steps": args.steps, "log_every": 1},
                "optim": {"grad_clip": clip}, "parallel": {"zero_stage": 2}, "offload": {"optimizer": "cpu"},
                "data": {"train": data}})
            p = testlib.run([args.ztrain, "train", spec], check=False)
            if p.returncode != 0:
                print(f"early {name}: exit {p.returncode}: {p.stderr[-800:]}")
                return 1
            with open(os.path.join(out, "metrics.jsonl")) as f:
                rows = [r for r in map(json.loads, f) if r.get("kind") == "train"]
            steps[name] = statistics.median(r["step_ms"] for r in rows[1:])
        streamed = 24 * n_params
        step_rate = streamed / (results["nvme"] / 1e3)
        disk = dd_rate(nvme, int(streamed))
        report = {"n_params": n_params, "optimizer_ms": results,
                  "cpu_offload_vs_device": results["cpu"] / results["none"],
                  "nvme_streamed_bytes": streamed, "nvme_step_bytes_per_s": step_rate,
                  "dd_direct_bytes_per_s": disk, "nvme_step_vs_dd": step_rate / disk,
                  "step_ms_adamw_during_backward": steps["during"], "step_ms_adamw_after_backward": steps["after"],
                  "during_vs_after": steps["during"] / steps["after"]}
        print(json.dumps(report, indent=1))
        print(f"optimizer step, {n_params / 1e6:.1f}M parameters: on device {results['none']:.1f} ms, cpu offload "
              f"{results['cpu']:.1f} ms ({results['cpu'] / results['none']:.2f}x), nvme {results['nvme']:.1f} ms: "
              f"{step_rate / 1e9:.2f} GB/s streamed vs dd O_DIRECT {disk / 1e9:.2f} GB/s ({step_rate / disk:.2f}x)")
        print(f"cpu offload, ZeRO-2, no clipping: step {steps['during']:.1f} ms with the host AdamW during backward, "
              f"{steps['after']:.1f} ms after it ({steps['during'] / steps['after']:.2f}x)")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
