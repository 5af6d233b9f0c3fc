#!/usr/bin/python3
"""ztrain-bench-comm on the emulated NCCL, as a smoke test: 3 ranks (an odd size), every op and
size from 1 KiB to 256 KiB, every result exact (#wrong = 0), over the NCCL communicator (not MPI's).
Then `ztrain doctor` with a GPU job's spec: its collectives timed over NCCL in device memory, as the
job's step moves them. Bandwidth figures from the emulated device mean nothing; only real hardware
measures them.

usage: bench_comm_smoke.py --bench ZTRAIN_BENCH_COMM --ztrain ZTRAIN --plugin LIBZTRAIN_CUDA_EMU --nccl LIBZTRAIN_NCCL_EMU
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--ztrain", required=True)
    setup = testlib.emulated_gpus(ap)
    failures, expect = testlib.checks()
    if setup is None:
        return 77
    args, env = setup
    p = testlib.run(testlib.mpirun(3) + [args.bench, "--backend", "nccl", "--min", "1K", "--max", "256K",
                                         "--iters", "3"], check=False, env=env, timeout=600)
    names = ("all_reduce", "reduce_scatter", "all_gather")
    rows = [line.split() for line in p.stdout.splitlines() if line.split()[:1] and line.split()[0] in names]
    ops = {r[0] for r in rows}
    wrong = [r for r in rows if len(r) < 7 or r[6] != "0"]
    print(next((line for line in p.stdout.splitlines() if line.startswith("# ztrain-bench-comm")), "(no header)"))
    print(f"{len(rows)} rows over {sorted(ops)}, {len(wrong)} with #wrong != 0")
    expect(p.returncode == 0 and "(nccl)" in p.stdout, f"exit {p.returncode}: {p.stdout[-500:]} {p.stderr[-800:]}")
    expect(ops == set(names) and len(rows) == 15 and not wrong,
           f"rows {rows}")
    with testlib.workdir("zt_doctor_nccl_") as work:
        spec = os.path.join(work, "gpu.toml")
        testlib.write_spec(spec, {"run": {"out_dir": os.path.join(work, "out"), "device": "cuda"},
                                  "model": {"n_layer": 1, "n_head": 1, "d_model": 8, "vocab_size": 257, "seq_len": 8},
                                  "data": {"train": work}})
        p = testlib.run(testlib.mpirun(2) + [args.ztrain, "doctor", spec], check=False, env=env, timeout=600)
        line = next((ln for ln in p.stdout.splitlines() if "collectives" in ln), "")
        print(f"doctor, a GPU job's spec: {line.strip()}")
        expect("2 ranks (1 machine of 2), NCCL in GPU memory, 16 MiB: all-reduce" in line,
               f"doctor with a GPU spec did not time NCCL: {p.stdout[-1500:]} {p.stderr[-800:]}")
    return testlib.report(failures, "ztrain-bench-comm and doctor over the emulated NCCL: every result exact")


if __name__ == "__main__":
    sys.exit(main())
