#!/usr/bin/python3
"""cuDNN's heuristics accept ztrain's fused-attention graphs for an H100 and an H200, without a GPU
(tests/cuda/cudnn_graphs_check.cpp, with the CUDA driver's stub library as libcuda.so.1); the
planted graph fault (P kept in fp32 for the second product) finds no forward engine, caught.
Skips, saying so, where cuDNN is not installed.
usage: cudnn_graphs.py CHECK_BINARY CUDA_DRIVER_STUB
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testlib  # noqa: E402


def main():
    binary, stub = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as d:
        os.symlink(os.path.abspath(stub), os.path.join(d, "libcuda.so.1"))
        env = {**os.environ, "LD_LIBRARY_PATH": d + os.pathsep + os.environ.get("LD_LIBRARY_PATH", "")}
        env.pop("ZTRAIN_TEST_CUDNN_P_FP32", None)
        p = subprocess.run([binary], capture_output=True, text=True, env=env, timeout=600)
        print(p.stdout, end="")
        if "libcudnn.so.9 not loaded" in p.stdout or "built without cuDNN's headers" in p.stdout:
            print("SKIP: cuDNN is not installed here (libcudnn.so.9 or its headers)")
            return testlib.SKIP
        failures = [] if p.returncode == 0 else [f"exit {p.returncode}: {p.stdout[-1500:]} {p.stderr[-1500:]}"]
        q = subprocess.run([binary], capture_output=True, text=True, env={**env, "ZTRAIN_TEST_CUDNN_P_FP32": "1"},
                           timeout=600)
        print("planted (P in fp32):", *[ln for ln in q.stdout.splitlines() if "GPT-2" in ln][:1])
        if q.returncode != 0:
            failures.append(f"the planted graph fault was not caught: {q.stdout[-1500:]} {q.stderr[-1500:]}")
    return testlib.report(failures, "cuDNN's heuristics find engines for ztrain's attention graphs on H100/H200")


if __name__ == "__main__":
    sys.exit(main())
