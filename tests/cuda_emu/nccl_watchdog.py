#!/usr/bin/python3
"""A stopped peer never hangs an NCCL collective whose result the host reads: rank 1 of 2 stops
before all_reduce_doubles; rank 0's ends the job at the 3 s timeout, naming the collective
(tests/cuda_emu/nccl_watchdog_check.cpp, on the emulated device and NCCL). Before the fix the
host blocked in a copy to pageable memory, outside the watchdog: the job hung (this test's own
limit of 240 s then fails it).
usage: nccl_watchdog.py CHECK_BINARY EMULATED_CUDA_PLUGIN EMULATED_NCCL_PLUGIN
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testlib  # noqa: E402


def main():
    binary, plugin, nccl = sys.argv[1:4]
    if testlib.mpirun_missing():
        return testlib.SKIP
    env = testlib.mpi_env(ZTRAIN_CUDA_PLUGIN=plugin, ZTRAIN_NCCL_PLUGIN=nccl)
    try:
        p = subprocess.run([*testlib.mpirun(2), binary], capture_output=True, text=True, env=env, timeout=240)
    except subprocess.TimeoutExpired:
        print("FAIL: the job hung: rank 0's all_reduce_doubles waited for its stopped peer outside the watchdog")
        return 1
    named = [ln for ln in p.stderr.splitlines() if "all_reduce(double)" in ln and "3 s" in ln]
    print(f"rank 1 stopped before all_reduce_doubles: exit {p.returncode}; {named[:1]}")
    ok = p.returncode != 0 and named and "returned without its peer" not in p.stdout
    return testlib.report([] if ok else [f"exit {p.returncode}: {p.stdout[-400:]} {p.stderr[-1200:]}"],
                          "the watchdog ends a job whose host waits for a stopped peer's collective")


if __name__ == "__main__":
    sys.exit(main())
