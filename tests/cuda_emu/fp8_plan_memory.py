#!/usr/bin/python3
"""FP8's memory plan on the CUDA backend: `ztrain plan`'s peak device bytes equal, to the byte, the
caching allocator's measured peak of a real 2-step run on 2 emulated GPUs over the emulated NCCL,
at ZeRO stages 0-3, with every block linear layer in FP8. What the CPU reference's plan test
(tests/observability/plan_vs_measured.py) cannot see lives here: the FP8 ops' device scratch, the
GEMM autotune's timing scratch and the caching allocator's size classes, with the weights' FP8
copies kept at stages 0-2 and the FP8 shards and gather of stage 3. (The planner once counted the
FP8 weight gradient's autotune scratch with a bias column that GEMM never has: 1 KiB over at
stages 0 and 1.) The same runs check the FP8 gather's numbers on the CUDA path: ZeRO-3 gathers all
8 FP8 weights as FP8 bytes and its losses equal stages 0-2's (weights cast once per update into
copies) bit for bit.
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402


def main():
    with testlib.emulated_test("zt_fp8_plan_", 20000, 5) as (args, env, failures, expect, work, data):
        spec = testlib.tiny_spec(
            os.path.join(work, "spec.toml"), os.path.join(work, "run"), data, seed=3, device="cuda",
            model={"n_layer": 2, "n_head": 2, "d_model": 64, "d_ff": 256, "vocab_size": 260, "seq_len": 32},
            train={"micro_batch": 2, "global_batch": 8, "max_steps": 2, "log_every": 1},
            precision__compute="bf16", precision__fp8="tensorwise", precision__fp8_layers="all")
        losses = {}
        for stage in (0, 1, 2, 3):
            sets = [f"parallel.zero_stage={stage}", f"run.out_dir={os.path.join(work, f'run{stage}')}"]
            argv = [a for s in sets for a in ("--set", s)]
            p = testlib.run(testlib.mpirun(2) + [args.ztrain, "train", spec, *argv], check=False, env=env,
                            timeout=900)
            m = re.search(r"rank 0 peak memory: .*\((\d+) bytes\)", p.stdout + p.stderr)
            q = testlib.run([args.ztrain, "plan", spec, "--world", "2", "--gpu", "h200", *argv], check=False)
            n = re.search(r"peak device memory: .*\((\d+) bytes\)", q.stdout)
            if p.returncode != 0 or not m or q.returncode != 0 or not n:
                expect(False, f"ZeRO-{stage}: train exit {p.returncode}, plan exit {q.returncode}: "
                              f"{(p.stderr + q.stderr)[-1500:]}")
                continue
            measured, planned = int(m.group(1)), int(n.group(1))
            print(f"ZeRO-{stage}: measured {measured} bytes, planned {planned}")
            expect(measured == planned, f"ZeRO-{stage}: the plan's peak {planned} != the measured {measured}")
            losses[stage] = [(r["step"], r["loss"]) for r in testlib.metrics(os.path.join(work, f"run{stage}"), "train")]
            if stage == 3:
                expect("FP8 gather: 8 of the 8 FP8 weights gathered as FP8 bytes" in p.stdout + p.stderr,
                       "ZeRO-3: the log does not say all 8 FP8 weights are gathered as FP8 bytes")
        for stage in (1, 2, 3):
            if 0 in losses and stage in losses:
                expect(len(losses[0]) == 2 and losses[stage] == losses[0],
                       f"ZeRO-{stage} losses = ZeRO-0's: {losses[stage]} vs {losses[0]}")
    return testlib.report(failures, "FP8's planned peak equals the emulated GPUs' measured peak at ZeRO 0-3, "
                                    "and ZeRO-3's FP8 gather trains as stages 0-2")


if __name__ == "__main__":
    sys.exit(main())
