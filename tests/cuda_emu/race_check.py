#!/usr/bin/env python3
"""test-backend-ops on the emulated CUDA device, and its race check.

Every op of tests/cuda/test_backend_ops.cpp runs on the emulated device (each CUDA thread a fiber)
and is compared with the CPU backend; then the same ops run again with the threads of every block
scheduled in another order between barriers (reversed, or shuffled by a seed), and every GPU
output must be bit-identical to the first run's: a kernel that reads what another thread writes
without a barrier between them computes something else under another order. Only outputs that
use atomics by design may differ: the non-deterministic embedding backward (atomicAdd scatter) and
the attention backward's dQ in FlashAttention-2's 5 units (summed with atomics; its deterministic
7-unit plan is compared).
Runs: every op with the default attention (FlashAttention-2 where it applies), the first
generation of the FlashAttention-2 kernels, the WMMA and the SIMT attention kernels (and with
packed documents' offsets), the GEMMs
with cuBLASLt's fused epilogues off, and the GEMMs with the heuristic's first algorithm failing at
run time (the next must take its place).

usage: race_check.py TEST_BACKEND_OPS_BINARY EMULATED_PLUGIN
"""
import os
import subprocess
import sys
import tempfile
import time

# checks whose outputs are summed with atomics (ops.cuh: "except the embedding's token-row scatter")
ATOMIC = ("embedding_backward dwte", "embedding_backward dwpe", "attention_backward B")

# GEMMs chosen by measurement may fuse an epilogue in one run and not in the other (a fused
# epilogue rounds otherwise): the compared runs pin cuBLASLt's first heuristic and its fusions, and
# one run checks the measured choices against the CPU backend
PINNED = {"ZTRAIN_GEMM_AUTOTUNE": "off"}
RUNS = [  # (label, extra environment, schedules compared)
    # `warps`: each warp to its next barrier before the next warp starts (a barrier missing between
    # warps that meet in the same warp collectives shows only there)
    ("all ops, default attention", PINNED, ["forward", "reverse", "warps"]),
    ("GEMMs chosen by measurement", {"ZTRAIN_OPS_SECTIONS": "matmul"}, ["forward"]),
    # every head-size-64/128 16-bit case on the FlashAttention-2 kernels, none falling back (an odd
    # B NH T once left the dQ accumulator 4-byte aligned, and the backward ran the WMMA kernels)
    ("attention, FlashAttention-2 required", {"ZTRAIN_ATTENTION": "fa2", "ZTRAIN_OPS_SECTIONS": "attention",
                                              "ZTRAIN_OPS_DTYPES": "bf16"}, ["forward"]),
    ("attention, WMMA kernels", {"ZTRAIN_ATTENTION": "wmma", "ZTRAIN_OPS_SECTIONS": "attention",
                                 "ZTRAIN_OPS_DTYPES": "bf16"}, ["forward", "random:7"]),
    ("attention, SIMT kernels", {"ZTRAIN_ATTENTION": "simt", "ZTRAIN_OPS_SECTIONS": "attention",
                                 "ZTRAIN_OPS_DTYPES": "fp16"}, ["forward", "reverse"]),
    # packed documents on the other kernel families at head sizes 64 and 128 too
    ("documents, WMMA kernels", {"ZTRAIN_ATTENTION": "wmma", "ZTRAIN_OPS_SECTIONS": "documents",
                                 "ZTRAIN_OPS_DTYPES": "bf16"}, ["forward"]),
    ("documents, SIMT kernels", {"ZTRAIN_ATTENTION": "simt", "ZTRAIN_OPS_SECTIONS": "documents",
                                 "ZTRAIN_OPS_DTYPES": "fp16"}, ["forward"]),
    ("GEMMs, fused epilogues off", {"ZTRAIN_GEMM_EPILOGUES": "off", "ZTRAIN_OPS_SECTIONS": "matmul", **PINNED},
     ["forward", "random:3"]),
    # the first heuristic algorithm of every GEMM fails at run time (a planted fault of the emulated
    # cuBLASLt): the next one takes its place, untimed (it threw before) and timed
    ("GEMMs, the first heuristic failing at run time", {"ZTRAIN_OPS_SECTIONS": "matmul",
                                                         "ZTRAIN_EMU_CUBLASLT_FAIL_VARIANT": "0", **PINNED},
     ["forward"]),
    ("GEMMs chosen by measurement, the first heuristic failing", {"ZTRAIN_OPS_SECTIONS": "matmul",
                                                                   "ZTRAIN_EMU_CUBLASLT_FAIL_VARIANT": "0"},
     ["forward"]),
]


def run(binary, plugin, extra, schedule, digest):
    env = dict(os.environ, ZTRAIN_CUDA_PLUGIN=plugin, ZTRAIN_EMU_SCHEDULE=schedule, ZTRAIN_OPS_DIGEST=digest,
               **extra)
    t0 = time.time()
    p = subprocess.run([binary], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout, time.time() - t0


def read_digest(path):
    with open(path) as f:
        return [line.rstrip("\n").split(" ", 2) for line in f]


def main():
    binary, plugin = sys.argv[1], sys.argv[2]
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for label, extra, schedules in RUNS:
            digests = []
            for sched in schedules:
                path = os.path.join(tmp, f"{len(digests)}.txt")
                rc, out, secs = run(binary, plugin, extra, sched, path)
                tail = [l for l in out.splitlines() if "FAIL" in l or "EXCEPTION" in l or "emulated device" in l]
                print(f"{label}, threads {sched}: exit {rc}, {secs:.1f} s, " + out.strip().splitlines()[-1])
                for line in tail[:20]:
                    print("   ", line)
                if rc != 0:
                    failed = True
                    if not tail:
                        print(out[-3000:])
                digests.append(read_digest(path) if os.path.exists(path) else [])
            a = digests[0]  # with one schedule: correctness against the CPU backend only
            for sched, b in zip(schedules[1:], digests[1:]):
                if len(a) != len(b):
                    print(f"  RACE CHECK: {len(a)} vs {len(b)} checked outputs")
                    failed = True
                    continue
                differ = [(x[1], x[2]) for x, y in zip(a, b) if x[0] != y[0] and not x[2].startswith(ATOMIC)]
                atomics = sum(1 for x, y in zip(a, b) if x[0] != y[0] and x[2].startswith(ATOMIC))
                print(f"  race check {schedules[0]} vs {sched}: {len(a)} outputs, {len(differ)} differ"
                      f" ({atomics} atomic-by-design outputs differ, allowed)")
                for dt, what in differ[:20]:
                    print(f"    DIFFERS: {dt} {what}")
                failed |= bool(differ)
    print("FAIL" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
