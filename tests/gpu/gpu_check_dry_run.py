#!/usr/bin/python3
"""tools/gpu_check.sh --dry-run: the GPU check's plumbing without a GPU, so that the check works
the first time a GPU is lent. Every stage runs under its limit and lands in the results file and
the log at once; a stage that hangs is cut at its limit and one that crashes keeps its partial
output, and the stages after them still run; the deadline skips what does not fit; the PyTorch
baseline script trains (a tiny model, on the CPU); what comes back fits the device tool's limits
(at most 8 files).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(HERE, ".."))
import testlib  # noqa: E402

# in order of value: a run cut by the deadline loses the last ones
STAGES = ["build", "ops", "ops_cudnn", "parity", "bench", "pytorch", "attention", "attention_cudnn", "sdpa", "gemm",
          "fp8", "nccl", "sanitizer_memcheck",
          "bench_deterministic", "pytorch_compile", "torch_llama", "sanitizer_racecheck", "zero3",
          "bench_head_whole", "bench_text", "ops_wmma", "attention_wmma", "hang_probe", "crash_probe"]


def main():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: PyTorch not importable by /usr/bin/python3 (Debian: python3-torch)")
        return testlib.SKIP
    failures = []
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, OUT=out, PYTHON=sys.executable)
        p = subprocess.run(["bash", os.path.join(ROOT, "tools", "gpu_check.sh"), "--dry-run"], env=env,
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            failures.append(f"dry run exited {p.returncode}: {p.stderr[-800:]}")
        # the plan: the stages in order with their limits, under a deadline of at most 300 s (a
        # lease of 15 minutes holds the machine's start, the run and a second try)
        plan = [ln.split() for ln in p.stdout.splitlines() if ln.startswith("  ") and ln.split()[0] in STAGES]
        budget = [ln for ln in p.stdout.splitlines() if ln.startswith("gpu_check plan: deadline ")]
        deadline = int(budget[0].split()[3]) if budget else None
        if [row[0] for row in plan] != STAGES or deadline is None or deadline > 300:
            failures.append(f"the printed plan: deadline {deadline}, stages {[row[0] for row in plan]}: {p.stdout[:800]}")
        else:
            print(f"the plan: {len(plan)} stages in order of value under a {deadline} s deadline, build included")
        res = json.load(open(os.path.join(out, "gpu_check.json")))
        log = open(os.path.join(out, "gpu_check.log")).read()
        st = res["stages"]
        if list(st) != STAGES:
            failures.append(f"stages {list(st)}, expected {STAGES}")
        for name in STAGES:
            if f"=== {name}: exit" not in log:
                failures.append(f"the log has no section for {name}")
        for name in STAGES[:8]:
            if not st.get(name, {}).get("ok") or not st[name].get("result"):
                failures.append(f"{name}: {st.get(name)}")
        hang = st.get("hang_probe", {})
        if not hang.get("timed_out") or hang.get("seconds", 99) > 8:
            failures.append(f"the hanging stage was not cut at its limit: {hang}")
        crash = st.get("crash_probe", {})
        if crash.get("signal") != 11 or crash.get("result") != [{"check": "crash_probe", "partial": True}]:
            failures.append(f"the crashing stage: signal and partial output not kept: {crash}")
        torch_run = st.get("pytorch", {}).get("result", [{}])[0]
        if not torch_run.get("tokens_per_s", 0) > 0 or torch_run.get("device") != "cpu":
            failures.append(f"the PyTorch baseline did not train: {torch_run}")
        layer = st.get("torch_llama", {}).get("result", [{}])[0]
        if not layer.get("layer_ms", 0) > 0 or layer.get("mode") != "eager":
            failures.append(f"the PyTorch Llama layer did not run: {st.get('torch_llama')}")
        if sorted(res["derived"]["not_measured"]) != ["crash_probe", "hang_probe"]:
            failures.append(f"derived not_measured: {res['derived']['not_measured']}")
        if len(os.listdir(out)) > 8:
            failures.append(f"{len(os.listdir(out))} files in OUT (the device tool returns 8)")
        print(f"dry run: {len(st)} stages in the results; hang cut after {hang.get('seconds')} s; "
              f"crash kept its output; PyTorch tiny {torch_run.get('tokens_per_s')} tokens/s on the CPU")

        # the deadline: with 6 s (stages start only with 5 s left), the stages after the first second are
        # skipped, not run late
        env["GPU_CHECK_BUDGET_S"] = "6"
        t0 = time.time()
        p = subprocess.run(["bash", os.path.join(ROOT, "tools", "gpu_check.sh"), "--dry-run"], env=env,
                           capture_output=True, text=True, timeout=300)
        res = json.load(open(os.path.join(out, "gpu_check.json")))
        skipped = [n for n, s in res["stages"].items() if s.get("skipped")]
        ran = [n for n, s in res["stages"].items() if not s.get("skipped")]
        if "crash_probe" not in skipped or not ran or time.time() - t0 > 20:
            failures.append(f"deadline: skipped {skipped} in {time.time() - t0:.1f} s")
        else:
            print(f"deadline of 6 s: {len(ran)} stages ran, {len(skipped)} skipped ({', '.join(skipped)})")
    return testlib.report(failures, "gpu_check --dry-run: every stage's plumbing works")


if __name__ == "__main__":
    sys.exit(main())
