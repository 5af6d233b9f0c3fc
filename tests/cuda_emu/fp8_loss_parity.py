#!/usr/bin/python3
"""FP8's loss-parity gate on the emulated device (issue 50): a tiny Llama on one emulated GPU and a
tiny GPT-2 under tensor 2 x data 2 with ZeRO-3 (4 emulated GPUs over the emulated NCCL), each
trained 200 steps from the same start with [precision] fp8 = "tensorwise" (fp8_layers = "all":
every block linear layer, the sizes are multiples of 16) and without it (bf16):
- every step's loss is finite in both runs;
- the FP8 run's final loss (the mean of the last 10 steps' losses: one step's loss is one
  micro-batch's, noisy) is within 1% of the bf16 run's;
- the FP8 run did run FP8: the log names the FP8 linear layers and cuBLASLt's FP8 products.
The planted bug: the emulated device built with the forward's weight scale not inverted
(tests/cuda_emu/mutations.py fp8_scale_not_inverted) fails the gate within 20 steps.
Refused at start-up with exit 2, naming the key: fp8 on an A100 (the emulated device saying so:
ZTRAIN_EMU_GPU=a100), with fp32 compute, and on the CPU backend without fp8_reference.

usage: fp8_loss_parity.py --ztrain ZTRAIN --tokenize TOKENIZE --plugin LIB --nccl LIB --mutant LIB
"""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

STEPS, LAST, GATE = 200, 10, 0.01
GPT2 = {"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 128, "vocab_size": 260, "seq_len": 16}
LLAMA = {"arch": "llama", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_model": 32, "d_ff": 96, "vocab_size": 260,
         "seq_len": 16}
CASES = [  # name, model, ranks, [parallel] keys (GPT-2 on one GPU: the planted case's 20 steps)
    ("llama", LLAMA, 1, {}),
    ("gpt2_T2_D2_zero3", GPT2, 4, {"parallel__tensor": 2, "parallel__zero_stage": 3, "comm__backend": "nccl"}),
]


def main():
    ap = testlib.arg_parser()
    ap.add_argument("--mutant", required=True, help="libztrain_cuda_emu_mutant_fp8_scale_not_inverted.so")
    with testlib.emulated_test("fp8_parity", 20000, 5, ap) as (args, env, failures, expect, work, data):

        def train(name, model, ranks, keys, fp8, steps, run_env):
            out = os.path.join(work, name)
            micro = 4 if ranks == 1 else 2  # 4 sequences a step on every layout (4 ranks: data 2)
            spec = testlib.tiny_spec(out + ".toml", out, data, model,
                                     {"micro_batch": micro, "global_batch": 4, "max_steps": steps, "log_every": 1},
                                     seed=7, device="cuda", precision__compute="bf16",
                                     precision__fp8="tensorwise" if fp8 else "none", precision__fp8_layers="all",
                                     **keys)
            p = testlib.run(testlib.mpirun(ranks) + [args.ztrain, "train", spec], check=False, env=run_env,
                            timeout=1800)
            losses = [r["loss"] for r in testlib.metrics(out, must_exist=False)]
            if p.returncode != 0 or len(losses) != steps:
                expect(False, f"{name}: exit {p.returncode}, {len(losses)} of {steps} losses: {p.stderr[-1500:]}")
                return None, p.stdout + p.stderr
            return losses, p.stdout + p.stderr

        def gate(name, fp8, bf16):
            """(relative difference of the final losses, every step finite)"""
            finite = all(math.isfinite(x) for x in fp8 + bf16)
            f, b = sum(fp8[-LAST:]) / LAST, sum(bf16[-LAST:]) / LAST
            rel = abs(f - b) / abs(b) if finite else math.inf
            print(f"{name}: final loss (mean of the last {LAST} of {len(fp8)} steps) FP8 {f:.4f}, bf16 {b:.4f}: "
                  f"{100 * rel:.3f}% apart; every step finite: {finite}", flush=True)
            return rel, finite

        bf16_gpt2_head = None
        for name, model, ranks, keys in CASES:
            bf16, _ = train(f"{name}_bf16", model, ranks, keys, False, STEPS, env)
            fp8, log = train(f"{name}_fp8", model, ranks, keys, True, STEPS, env)
            if bf16 is None or fp8 is None:
                continue
            if name.startswith("gpt2"):  # the same data, start and global batch on every layout
                bf16_gpt2_head = bf16[:20]
            rel, finite = gate(name, fp8, bf16)
            expect(finite, f"{name}: a non-finite loss")
            expect(rel <= GATE, f"{name}: FP8's final loss is {100 * rel:.3f}% from bf16's (gate {100 * GATE:.0f}%)")
            expect("FP8 linear layers: " in log, f"{name}: the log names no FP8 linear layers")
            expect("FP8 E4M3" in log, f"{name}: no FP8 cuBLASLt product was chosen")

        # what cannot run FP8 ends before its first step, exit 2, naming the key and why
        refusals = [("an A100", "cuda", {"precision__compute": "bf16"}, dict(env, ZTRAIN_EMU_GPU="a100"),
                     "A100-SXM4-80GB (emulated)) has compute capability 8.0"),
                    ("fp32 compute", "cuda", {"precision__compute": "fp32"}, env, 'compute = "bf16" or "fp16"'),
                    ("the CPU", "cpu", {}, env, "fp8_reference = true")]
        for what, device, keys, run_env, says in refusals:
            out = os.path.join(work, "refused")
            spec = testlib.tiny_spec(out + ".toml", out, data, GPT2, {"micro_batch": 4, "global_batch": 4,
                                     "max_steps": 1}, device=device, precision__fp8="tensorwise", **keys)
            p = testlib.run([args.ztrain, "train", spec], check=False, env=run_env, timeout=300)
            line = (p.stderr.strip().splitlines() or [""])[-1]
            print(f"fp8 on {what}: exit {p.returncode}: {line}", flush=True)
            expect(p.returncode == 2 and '[precision] fp8 = "tensorwise"' in line and says in line,
                   f"fp8 on {what}: exit {p.returncode}, not refused naming the key and '{says}': {line}")

        # the planted bug (the forward's weight scale not inverted) fails the gate
        if bf16_gpt2_head is not None:
            planted = dict(env, ZTRAIN_CUDA_PLUGIN=args.mutant)
            fp8, _ = train("gpt2_fp8_planted", GPT2, 1, {}, True, 20, planted)
            if fp8 is not None:
                rel, finite = gate("planted fp8_scale_not_inverted", fp8, bf16_gpt2_head)
                expect(not finite or rel > GATE, "the planted wrong scale passed the gate")
    return testlib.report(failures, f"FP8's final losses within {100 * GATE:.0f}% of bf16's after {STEPS} steps; "
                                    "the planted wrong scale fails the gate")


if __name__ == "__main__":
    sys.exit(main())
