#!/usr/bin/python3
"""ptxas's resource report for every kernel of the CUDA backend (engine/backend/cuda/*.cu), compiled
for sm_90 as the GPU check builds them: registers, spill bytes, static shared memory. Fails when a
kernel spills, unless it is one of the spills this file names with their sizes (a spill that grows
fails too), or when a kernel's static shared memory passes the 48 KiB a block gets without opting
in. tools/kernel_report.py covers the FlashAttention-2 kernels in depth (shared bytes per mma).

usage: ptxas_resources.py [--arch sm_90] [--no-known-spills]
  --no-known-spills  the named spills fail too (shows that the gate fires)
Exit status 77 when nvcc is not found.
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import testlib  # noqa: E402
from kernel_report import parse_ptxas_verbose  # noqa: E402  the same reading of ptxas's report
CUDA_DIR = os.path.join(ROOT, "engine", "backend", "cuda")
# Spills known and accepted: (file, a regular expression on the demangled kernel, the most spill
# store bytes, the most spill load bytes), each with why.
KNOWN_SPILLS = [
    # the CUDA-core attention's dK/dV kernel at 2 head-dimension chunks (head sizes 33-64 off the
    # tensor cores: fp32, and head sizes the tensor-core kernels refuse); it sits at 255 registers
    ("attention.cu", r"attention_backward_dkdv_kernel<[^,]+, 2>", 148, 560),
    # the FlashAttention-2 dQ pass (the deterministic 7-unit backward) at head size 128 with packed
    # documents' offsets: 255 registers without them (its rows' first keys live in shared memory,
    # yet the mask's compare takes two more)
    ("attention_fa2.cu", r"attention_backward_dq_fa2_kernel<[^,]+, 128, true>", 8, 12),
]


def compile_one(nvcc, arch, src, work):
    p = subprocess.run([nvcc, "-std=c++17", "-O3", f"-arch={arch}", "-I", ROOT, "-I",
                        os.path.join(ROOT, "tools", "gpu_check", "shim"), "-Xptxas", "-v", "-c", src,
                        "-o", os.path.join(work, os.path.basename(src) + ".o")], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{src}: nvcc failed:\n{p.stderr[-2000:]}")
    return p.stderr


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool:
        return {n: n for n in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--no-known-spills", action="store_true")
    a = ap.parse_args()
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if not nvcc:
        print("SKIP: nvcc not found")
        return 77
    sources = sorted(os.path.join(CUDA_DIR, f) for f in os.listdir(CUDA_DIR) if f.endswith(".cu"))
    failures, rows = [], []
    with tempfile.TemporaryDirectory(prefix="zt_ptxas_") as work, \
            concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        reports = dict(zip(sources, pool.map(lambda s: compile_one(nvcc, a.arch, s, work), sources)))
    for src, report in reports.items():
        kernels = parse_ptxas_verbose(report)
        names = demangle(list(kernels))
        for mangled, r in kernels.items():
            name, fn = names[mangled], os.path.basename(src)
            rows.append((fn, name, r))
            if r["spill_stores"] or r["spill_loads"]:
                known = None if a.no_known_spills else next(
                    (k for k in KNOWN_SPILLS if k[0] == fn and re.search(k[1], name)), None)
                if not known or r["spill_stores"] > known[2] or r["spill_loads"] > known[3]:
                    failures.append(f"{fn}: {name[:160]} spills {r['spill_stores']}/{r['spill_loads']} bytes "
                                    f"(stores/loads) at {r['registers']} registers")
            if r["static_smem"] > 48 * 1024:
                failures.append(f"{fn}: {name[:160]} has {r['static_smem']} bytes of static shared memory (> 48 KiB)")
    by_file = {}
    for fn, _, r in rows:
        f = by_file.setdefault(fn, [0, 0, 0])
        f[0] += 1
        f[1] = max(f[1], r["registers"])
        f[2] += 1 if r["spill_stores"] or r["spill_loads"] else 0
    print(f"ptxas ({a.arch}): {len(rows)} kernels in {len(reports)} files")
    for fn, (n, regs, spilling) in sorted(by_file.items()):
        print(f"  {fn:<24} {n:>4} kernels, at most {regs} registers, {spilling} spilling")
    return testlib.report(failures, f"no kernel spills but the {len(KNOWN_SPILLS)} named, none past 48 KiB of "
                                    "static shared memory")


if __name__ == "__main__":
    sys.exit(main())
