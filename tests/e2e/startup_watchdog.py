#!/usr/bin/python3
"""The start-up watchdog (engine/comm/startup_watchdog.h): one rank of `mpirun -np 3` replaced by
a process that only sleeps never reaches MPI_Init. Without the watchdog the other ranks wait in
MPI_Init forever, printing nothing. With it the job ends within [comm] timeout_s (3 s here) plus
the launcher's answer, and the message names the missing rank and its host: rank 1 (reported by
rank 0), then rank 0 itself (reported by rank 1, the lowest rank that arrived).
Skips (exit 77) without mpirun.
"""
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testlib  # noqa: E402


def main():
    with testlib.mpi_test("zt_startup_", 4000, 2) as (args, failures, expect, work, data):
        spec = testlib.tiny_spec(os.path.join(work, "run.toml"), os.path.join(work, "run"), data,
                                 model=testlib.TINY_MODEL, train={"micro_batch": 2, "global_batch": 6, "max_steps": 2},
                                 comm__timeout_s=3)
        sleeper = os.path.join(work, "sleeper.sh")
        with open(sleeper, "w") as f:  # the rank named by SLEEP_RANK never starts ztrain
            f.write('#!/bin/sh\nif [ "$OMPI_COMM_WORLD_RANK" = "$SLEEP_RANK" ]; then exec sleep 300; fi\nexec "$@"\n')
        os.chmod(sleeper, 0o755)
        host = socket.gethostname()
        for missing, reporter in [(1, 0), (0, 1)]:
            env = testlib.mpi_env(SLEEP_RANK=str(missing))
            t0 = time.monotonic()
            try:
                p = subprocess.run([*testlib.mpirun(3), "-x", "SLEEP_RANK", sleeper, args.ztrain, "train", spec],
                                   env=env, capture_output=True, text=True, timeout=90)
                rc, err = p.returncode, p.stderr
            except subprocess.TimeoutExpired as e:
                rc, err = None, (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else str(e.stderr)
            took = time.monotonic() - t0
            line = next((ln for ln in err.splitlines() if "MPI_Init has not returned" in ln), "")
            expect(rc not in (None, 0) and f"rank {reporter}: MPI_Init has not returned after 3 s" in line
                   and f"rank {missing} (host {host}) never arrived" in line and took < 60,
                   f"rank {missing} never started: exit {rc} after {took:.1f} s: {line or err[-600:]}")
            print(f"rank {missing} never started: the job ended after {took:.1f} s (timeout 3 s): {line}")
    return testlib.report(failures, "start-up watchdog: a rank that never arrives is named, the job ends")


if __name__ == "__main__":
    sys.exit(main())
