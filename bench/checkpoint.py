#!/usr/bin/python3
"""Checkpoint speed on this machine's disk, as ratios measured in one run (GPT-2 124M shapes by
default: 124M parameters, 1.5 GB of fp32 masters + AdamW moments per checkpoint):
- save bandwidth: a synchronous save (every byte written and fsynced) vs `dd ... conv=fsync`
  writing the same number of bytes to the same directory (goal >= 0.8x);
- async stall: what the training loop pauses for an async save (the copy into host buffers, plus
  rank 0's commit) vs a synchronous save (goal <= 5%);
- load time: resume (verify every checksum, then load) in the layout that wrote it, and resharded
  (written by 1 process, read by 2 ranks with ZeRO-1);
- signal to exit: SIGTERM during training until the process has exited with its checkpoint, and
  the preemption budget's estimate of a save's time ([checkpoint] preemption_notice_s) against
  the measured SIGTERM save (goal: within 25%).
The step itself is kept cheap (micro_batch 1, seq_len 64) so the run is dominated by checkpoints.
Usage: bench/checkpoint.py [--n_layer 12 --d_model 768 --vocab 50304] [--dir /path/on/the/disk]
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import testlib  # noqa: E402

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def rows(out_dir, kind):
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r["kind"] == kind]


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(path) for f in fs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--n_layer", type=int, default=12)
    ap.add_argument("--d_model", type=int, default=768)
    ap.add_argument("--n_head", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--dir", default=None, help="where checkpoints go (default: a temporary directory)")
    a = ap.parse_args()
    ztrain, tokenize = os.path.join(a.build, "ztrain"), os.path.join(a.build, "ztrain-tokenize")
    work = tempfile.mkdtemp(prefix="zt_bench_ckpt_", dir=a.dir)
    try:
        data = testlib.make_byte_dataset(tokenize, os.path.join(work, "data"), 20000, 3)
        spec = os.path.join(work, "spec.toml")
        testlib.write_spec(spec, {
            "run": {"out_dir": os.path.join(work, "run"), "seed": 1, "device": "cpu", "threads": 2},
            "model": {"n_layer": a.n_layer, "n_head": a.n_head, "d_model": a.d_model, "vocab_size": a.vocab,
                      "seq_len": 64},
            "train": {"micro_batch": 1, "global_batch": 2, "max_steps": 6, "log_every": 1},
            "data": {"train": data},
        })

        def train(name, *sets, np_=1, resume=None):
            out = os.path.join(work, name)
            argv = ([] if np_ == 1 else ["mpirun", "--oversubscribe", "-np", str(np_)]) + [
                ztrain, "train", spec, "--set", f"run.out_dir={out}", "--set", f"checkpoint.dir={out}/ckpt"]
            for s in sets:
                argv += ["--set", s]
            if resume:
                argv += ["--resume", resume]
            t0 = time.time()
            p = testlib.run(argv, env=ENV, timeout=3600)
            return out, p, time.time() - t0

        # one periodic save at step 3 (nothing pending before it), then the final one at step 6
        sync_out, _, _ = train("sync", "checkpoint.every_steps=3", "checkpoint.async=false", "checkpoint.keep_last=1")
        async_out, _, _ = train("async", "checkpoint.every_steps=3", "checkpoint.keep_last=1")
        s_row, a_row = rows(sync_out, "checkpoint")[0], rows(async_out, "checkpoint")[0]
        ckpt_bytes = dir_bytes(os.path.join(sync_out, "ckpt", "step_00000006"))
        sync_s = (s_row["stall_ms"] + s_row["commit_ms"]) / 1e3
        async_stall = a_row["stall_ms"] / 1e3  # rank 0's commit runs in the background too
        write_s = a_row["write_s"]

        # dd writing the same bytes to the same disk, fsynced
        target = os.path.join(work, "dd.bin")
        mib = max(1, int(ckpt_bytes / 1048576))
        t0 = time.time()
        subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={mib}", "conv=fsync"],
                       check=True, capture_output=True)
        dd_s = time.time() - t0
        os.remove(target)
        save_bw, dd_bw = ckpt_bytes / sync_s / 1e6, mib * 1048576 / dd_s / 1e6

        # load: same layout, and resharded onto 2 ranks with ZeRO-1
        _, p, _ = train("sync", "train.max_steps=6", resume="auto")  # nothing left to train: load only
        m = re.search(r"verified and loaded in ([\d.]+) s", p.stderr)
        load_s = float(m.group(1)) if m else float("nan")
        reshard_out = os.path.join(work, "reshard")
        shutil.copytree(os.path.join(sync_out, "ckpt"), os.path.join(reshard_out, "ckpt"))
        _, p, _ = train("reshard", "train.max_steps=6", "parallel.zero_stage=1", np_=2, resume="auto")
        m = re.search(r"verified and loaded in ([\d.]+) s", p.stderr)
        reshard_s = float(m.group(1)) if m else float("nan")

        # SIGTERM during training: time until the process has exited with its checkpoint, and the
        # preemption budget's estimate against that save: the write probe's at start, and (with
        # synchronous saves every 2 steps) the previous save's own time
        def sigterm(name, at_step, *sets):
            out = os.path.join(work, name)
            log = os.path.join(work, name + ".log")
            with open(log, "w") as err:
                proc = subprocess.Popen([ztrain, "train", spec, "--set", f"run.out_dir={out}", "--set",
                                         f"checkpoint.dir={out}/ckpt", "--set", "train.max_steps=1000",
                                         "--set", "checkpoint.preemption_notice_s=30", *[x for v in sets for x in ("--set", v)]],
                                        env=ENV, stdout=subprocess.PIPE, stderr=err, text=True)
                for line in proc.stdout:
                    if line.startswith(f"step {at_step}/"):
                        break
                t0 = time.time()
                proc.send_signal(signal.SIGTERM)
                rest, _ = proc.communicate(timeout=3600)
                took = time.time() - t0
            with open(log) as f:
                m = re.search(r"durable about ([\d.]+) s after a signal", f.read())
            probe = float(m.group(1)) if m else float("nan")
            m = re.search(r"written in ([\d.]+) s, durable ([\d.]+) s after the signal \(save estimated at ([\d.]+) s", rest)
            saved, durable, estimate = (float(m.group(k)) for k in (1, 2, 3)) if m else [float("nan")] * 3
            shutil.rmtree(out, ignore_errors=True)
            return took, durable, saved, probe, estimate

        sig_s, durable_s, saved_s, estimate_s, _ = sigterm("sigterm", 2)
        _, _, saved2_s, _, refined_s = sigterm("sigterm_sync", 3, "checkpoint.every_steps=2", "checkpoint.async=false")

        params = a.n_layer * 12 * a.d_model ** 2 + a.vocab * a.d_model
        print(f"checkpoint benchmark: GPT-2 shapes, {a.n_layer} layers, d_model {a.d_model}, vocab {a.vocab} "
              f"(~{params / 1e6:.0f}M parameters), {ckpt_bytes / 1e9:.2f} GB per checkpoint, disk under {work}")
        print(f"  save (synchronous, fsynced):   {sync_s:.2f} s = {save_bw:.0f} MB/s; dd conv=fsync {dd_s:.2f} s = "
              f"{dd_bw:.0f} MB/s; ratio {save_bw / dd_bw:.2f}x (goal >= 0.8)")
        print(f"  async stall of the training loop (the copy to host buffers): {async_stall * 1e3:.0f} ms vs "
              f"synchronous {sync_s * 1e3:.0f} ms: {100 * async_stall / sync_s:.1f}% (goal <= 5%); in the background "
              f"the write took {write_s:.2f} s and rank 0's commit {a_row['commit_ms']:.0f} ms")
        print(f"  load (verify + read, same layout): {load_s:.2f} s; resharded 1 process -> 2 ranks ZeRO-1: {reshard_s:.2f} s")
        print(f"  SIGTERM -> exit with a checkpoint: {sig_s:.2f} s; durable {durable_s:.2f} s after the signal (the "
              f"step in progress, then the save)")
        print(f"  preemption budget: estimated save {estimate_s:.2f} s (write probe at start) vs the SIGTERM save "
              f"{saved_s:.2f} s: ratio {estimate_s / saved_s:.2f} (goal within 25%: 0.75-1.25)")
        print(f"  preemption budget after a save (synchronous, every 2 steps): estimated {refined_s:.2f} s (the save of "
              f"step 2) vs the SIGTERM save {saved2_s:.2f} s: ratio {refined_s / saved2_s:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
