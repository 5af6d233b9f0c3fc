#!/usr/bin/python3
"""Hardening (issue 17): each defect a hostile new user found, reproduced and checked fixed.
Numbers are the issue's items. Multi-rank cases run under mpirun; a rank gets its own arguments
through a wrapper script, as a site's launcher wrapper might give them.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

failures = []


def expect(cond, msg):
    if not cond:
        failures.append(msg)


def spec_dict(work, data, out="run", **over):
    spec = {
        "run": {"out_dir": os.path.join(work, out), "seed": 42, "device": "cpu", "threads": 1},
        "model": {"n_layer": 1, "n_head": 2, "d_model": 16, "vocab_size": 258, "seq_len": 16},
        "train": {"micro_batch": 2, "global_batch": 4, "max_steps": 3, "log_every": 1},
        "optim": {"lr": 1e-3},
        "data": {"train": data},
    }
    for k, v in over.items():
        sec, key = k.split("__")
        spec[sec][key] = v
    return spec


def write(work, name, spec):
    path = os.path.join(work, name + ".toml")
    testlib.write_spec(path, spec)
    return path


def error_lines(p):
    return [l for l in p.stderr.splitlines() if l.startswith("ztrain")]


def rank_wrapper(work, ztrain, rank, extra):
    """A launcher wrapper that passes `extra` arguments to one rank only."""
    path = os.path.join(work, f"wrap_rank{rank}_{abs(hash(tuple(extra)))}.sh")
    with open(path, "w") as f:
        f.write("#!/bin/sh\n"
                f'if [ "$OMPI_COMM_WORLD_RANK" = "{rank}" ]; then exec {ztrain} "$@" {" ".join(extra)}; fi\n'
                f'exec {ztrain} "$@"\n')
    os.chmod(path, 0o755)
    return path


def mpirun(np_, cmd, timeout=90):
    t0 = time.time()
    try:
        p = subprocess.run(["mpirun", "--oversubscribe", "-np", str(np_), *cmd], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return None, time.time() - t0
    return p, time.time() - t0


def multi_rank(args, work, data):
    # 1. a spec error on one rank only: every rank ends, exit 2, the error printed once with its rank
    spec = write(work, "mr", spec_dict(work, data, "mr_run"))
    for extra, needle in ((["--set", "model.n_layer=0"], "[model] n_layer: must be >= 1"),
                          (["--set", "optim.lr=nan"], "[optim] lr"),
                          (["--bogus"], "unknown option --bogus"),
                          (["--set", "nosuch.key=1"], "unknown section [nosuch]")):
        p, secs = mpirun(2, [rank_wrapper(work, args.ztrain, 1, extra), "train", spec])
        if p is None:
            expect(False, f"1: {extra} on rank 1 only: the job hung ({secs:.0f} s)")
            continue
        lines = error_lines(p)
        expect(p.returncode == 2 and len(lines) == 1 and "rank 1:" in lines[0] and needle in lines[0],
               f"1: {extra} on rank 1 only: expected exit 2 and one line naming rank 1 and {needle!r}; "
               f"got {p.returncode} in {secs:.1f} s: {p.stderr.strip()[-600:]!r}")
    print("1: an error on one rank ends the job with exit 2 and one message naming the rank")

    # 2. different valid specs on the ranks: exit 2 naming the first differing key and both values
    for extra, needle in ((["--set", "run.seed=43"], "[run] seed = 43 on rank 1, 42 on rank 0"),
                          (["--set", "optim.lr=0.002"], "[optim] lr = 0.002 on rank 1, 0.001 on rank 0"),
                          (["--set", "model.n_layer=2"], "[model] n_layer = 2 on rank 1, 1 on rank 0"),
                          (["--set", f"data.train={data}/"], "[data] train")):
        p, secs = mpirun(2, [rank_wrapper(work, args.ztrain, 1, extra), "train", spec])
        if p is None:
            expect(False, f"2: {extra} on rank 1 only: the job hung")
            continue
        lines = error_lines(p)
        expect(p.returncode == 2 and len(lines) == 1 and needle in lines[0],
               f"2: {extra} on rank 1 only: expected exit 2 and one line with {needle!r}; "
               f"got {p.returncode}: {p.stderr.strip()[-600:]!r}")
    print("2: ranks started with different specs exit 2 naming the key and both values")

    # 18 (last part): an error every rank finds alike is printed once, not once per rank
    bad = write(work, "gb", spec_dict(work, data, "gb_run"))  # global batch 4, 3 ranks x 2
    p, _ = mpirun(3, [args.ztrain, "train", bad])
    lines = error_lines(p) if p else []
    expect(p is not None and p.returncode == 2 and len(lines) == 1 and "global_batch" in lines[0],
           f"18: the global_batch error under 3 ranks: expected one line; got "
           f"{p.returncode if p else 'hang'}: {p.stderr if p else ''!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ztrain", required=True)
    ap.add_argument("--tokenize", required=True)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="zt_hard_")
    try:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 5000, 3)
        if shutil.which("mpirun"):
            multi_rank(args, work, data)
        else:
            print("SKIP (multi-rank items): mpirun not found (Debian: openmpi-bin)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return testlib.report(failures, "hardening: every reproduced defect is fixed")


if __name__ == "__main__":
    sys.exit(main())
