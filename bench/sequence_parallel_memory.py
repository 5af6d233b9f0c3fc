#!/usr/bin/python3
"""Megatron sequence parallelism's memory, planned and measured: a GPT-2 and a Llama shape (8
layers, d_model 256, seq_len 256, micro-batches of 4, bf16) on the CPU backend under mpirun, at
tensor = 1, 2 and 4, sequence parallelism off and on. For each: `ztrain plan --json`'s activation
bytes and peak on rank 0, and a real 2-step run's ("rank 0 memory: ... activations N MiB" and
"rank 0 peak memory ... (N bytes)"). Prints the table of docs/measured.md: the activations with
sequence parallelism over those without at the same tensor size, and whether the plan equals the
measurement (it must, to the byte: the plan builds the very model).

Usage: bench/sequence_parallel_memory.py --ztrain build/bin/ztrain --tokenize build/bin/ztrain-tokenize
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import testlib  # noqa: E402

GPT2 = {"n_layer": 8, "n_head": 8, "d_model": 256, "vocab_size": 260, "seq_len": 256}
LLAMA = dict(GPT2, arch="llama", n_kv_head=4, d_ff=704)


def main():
    args = testlib.arg_parser().parse_args()
    if testlib.mpirun_missing():
        print("SKIP: mpirun not found")
        return testlib.SKIP
    rows, bad = [], []
    with testlib.workdir("zt_spmem_") as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 60000, 3)
        for name, model in (("GPT-2", GPT2), ("Llama", LLAMA)):
            spec = testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, "run"), data, model,
                                     seed=1, train={"micro_batch": 4, "global_batch": 16, "max_steps": 2},
                                     optim={"lr": 1e-4}, precision__compute="bf16")
            base = {}
            for tensor in (1, 2, 4):
                for sp in ((False, True) if tensor > 1 else (False,)):
                    sets = ["--set", f"parallel.tensor={tensor}",
                            "--set", f"parallel.sequence_parallel={'true' if sp else 'false'}"]
                    p = testlib.run([args.ztrain, "plan", spec, "--world", str(tensor), "--json", *sets], check=False)
                    if p.returncode != 0:
                        bad.append(f"{name} T{tensor} sp={sp}: plan exit {p.returncode}: {p.stderr[-300:]}")
                        continue
                    plan = json.loads(p.stdout)
                    planned_act = plan["per_rank_bytes"]["device"]["activations"]
                    run = testlib.run([*testlib.mpirun(tensor), args.ztrain, "train", spec, *sets], check=False,
                                      env=testlib.mpi_env())
                    act = re.search(r"rank 0 memory: .*activations ([\d.]+) MiB", run.stderr)
                    peak = re.search(r"rank 0 peak memory: .* \((\d+) bytes\)", run.stderr)
                    if run.returncode != 0 or not act or not peak:
                        bad.append(f"{name} T{tensor} sp={sp}: run exit {run.returncode}: {run.stderr[-300:]}")
                        continue
                    measured_act = float(act.group(1))
                    if not sp:
                        base[tensor] = measured_act
                    rows.append((name, tensor, sp, planned_act / 2 ** 20, measured_act, plan["peak_device_bytes"],
                                 int(peak.group(1)), measured_act / base.get(tensor, measured_act)))
    print("| model | tensor | sequence parallel | activations planned (MiB) | measured (MiB) | vs off | "
          "peak planned (bytes) | measured (bytes) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, t, sp, pa, ma, pp, mp, ratio in rows:
        print(f"| {name} | {t} | {'on' if sp else 'off'} | {pa:.3f} | {ma:.3f} | {ratio:.2f} | {pp} | {mp} |")
        if pp != mp or abs(pa - ma) > 0.0015:
            bad.append(f"{name} T{t} sp={sp}: planned {pp} bytes ({pa:.3f} MiB activations), measured {mp} ({ma:.3f})")
    for b in bad:
        print("MISMATCH:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
