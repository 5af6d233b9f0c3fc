#!/usr/bin/python3
"""The planner's step time against other engines' published, measured training runs
(bench/published_runs.json: model, GPUs, layout, batch, sequence length, tokens/s per GPU, with
their sources). Each row becomes a run spec and a `ztrain plan --world N --gpu PROFILE
--calibration FILE --json`, priced as the row's engine runs it (its row's "kernels", from its
source: which attention kernel, which ops run eagerly, its checkpointing and tensor-parallel
schedule; as_the_engine_runs_it below); the predicted tokens/s per GPU must be within 35% of the
published figure. The calibrations are measurements on the H200 (bench/calibration/: cuBLASLt GEMMs,
memory bandwidth, and PyTorch's cuDNN and FlashAttention-2 attention backends, one file each); no
efficiency is fitted to a row. Each row's ratio with ztrain's own kernels is printed beside it.
Rows the planner cannot model (pipeline parallelism, FP8, a GPU without a profile) are listed as
skipped, with why.

A CI test (plan_published_runs_within_35_percent) and the table in docs/measured.md (--markdown).
Exit 1 while any row is outside 35%; 77 (skipped) without PyTorch, which counts the eager ops.

Usage: bench/published_runs.py --ztrain build/bin/ztrain [--markdown] [--runs FILE] [--calibration FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import testlib  # noqa: E402

try:
    import eager_traffic  # noqa: E402  (bench/, beside this file)
except ImportError as e:  # PyTorch, which runs the eager layers' ops: their rows are skipped
    eager_traffic, NO_TORCH = None, f"{e} (Debian: python3-torch)"

TOLERANCE = 0.35
PROFILES = [("H200", "h200"), ("H100", "h100"), ("A100", "a100"), ("A10", "a10"), ("L4", "l4")]


def profile_of(gpu):
    for key, name in PROFILES:  # longest names first where one contains another (A100, A10)
        if gpu and key in gpu.upper():
            return name
    return None


def kernels_of(row):
    """What the row's engine runs (its "kernels" entry), or, where the row has none, what its
    engine's source says it runs, by the engine's name (the entries in published_runs.json are
    these rules written out, each with its source): PyTorch engines call SDPA's FlashAttention-2
    backend or the flash-attn package and, without torch.compile, run their other ops eagerly;
    torchtitan checkpoints selectively by op and waits for its tensor collectives in line unless
    async TP is on; llm.c, Megatron and NeMo run fused kernels and cuDNN attention."""
    if row.get("kernels") is not None:
        return row["kernels"]
    engine, compiled = row.get("engine", "").lower(), bool(row.get("compile"))
    llama = "llama" in row.get("model", "").lower() or (row.get("n_kv_head") or row.get("n_head")) != row.get("n_head")
    if "torchtitan" in engine or "torchtune" in engine:
        k = {"attention": "flash", "eager_layer": None if compiled or not llama else "torchtitan-llama"}
        if "torchtitan" in engine:
            k["op_sac"] = row.get("recompute") == "selective"
            other = (row.get("other") or "").lower()  # "vanilla (synchronous) TP; async TP gave ..."
            if (row.get("tensor") or 1) > 1 and ("vanilla" in other or "async" not in other):
                k["tp_overlap"] = False
        return k
    if "llm-foundry" in engine or "mosaicml" in engine:
        return {"attention": "flash", "eager_layer": None if compiled or llama else "llm-foundry-mpt"}
    return {"attention": "cudnn", "eager_layer": None}


def why_not(row):
    """Why the planner cannot price this row as published, or None."""
    if (row.get("pipeline") or 1) > 1:
        return "pipeline parallelism (not in ztrain)"
    if "bf16" not in (row.get("precision") or "bf16"):
        return f"{row['precision']} (ztrain plans bf16)"
    if not profile_of(row.get("gpu")):
        return f"no machine profile for {row.get('gpu')}"
    if not row.get("tokens_per_s_per_gpu"):
        return "no tokens/s per GPU published"
    for k in ("n_layer", "d_model", "n_head", "vocab_size", "seq_len", "gpus"):
        if not row.get(k):
            return f"{k} not given"
    kernels = kernels_of(row)
    if (kernels.get("eager_layer") or kernels.get("op_sac")) and eager_traffic is None:
        return f"its engine's ops are counted with PyTorch: {NO_TORCH}"
    if kernels.get("eager_layer") and (row.get("tensor") or 1) > 1 and not row.get("sequence_parallel"):
        return "eager ops under tensor parallelism without sequence parallelism (not modelled: the norms unsplit)"
    return None


def spec_of(row, path):
    llama = "llama" in row["model"].lower() or (row.get("n_kv_head") or row["n_head"]) != row["n_head"]
    gpus, tensor = row["gpus"], row.get("tensor") or 1
    data = gpus // tensor
    micro = row.get("micro_batch") or 1
    global_batch = row.get("global_batch") or micro * data
    sharding = (row.get("sharding") or "none").lower()
    zero = (3 if any(k in sharding for k in ("fsdp", "zero-3", "full_shard", "full shard")) else
            2 if "zero-2" in sharding else 1 if "zero-1" in sharding else 0)
    model = {"arch": "llama" if llama else "gpt2", "n_layer": row["n_layer"], "n_head": row["n_head"],
             "d_model": row["d_model"], "vocab_size": row["vocab_size"], "seq_len": row["seq_len"]}
    if row.get("d_ff"):
        model["d_ff"] = row["d_ff"]
    if llama:
        model["n_kv_head"] = row.get("n_kv_head") or row["n_head"]
        model["tie_embeddings"] = False
    testlib.write_spec(path, {
        "run": {"device": "cuda"},
        "model": model,
        "train": {"micro_batch": micro, "global_batch": global_batch,
                  "recompute": row.get("recompute") or "none"},
        "precision": {"compute": "bf16"},
        # torchtitan's tensor-parallel plan shards the norms with SequenceParallel
        "parallel": {"tensor": tensor, "zero_stage": zero, "sequence_parallel": bool(row.get("sequence_parallel"))},
        "data": {"train": "unused"},
    })


HOPPER = ("h100", "h200")  # where the H200's attention measurements stand for the kernel each engine runs


def plan(ztrain, row, spec, calibration, **changes):
    """`ztrain plan --json` of the row's run (with `changes` to the row: n_layer=..., ...)."""
    spec_of(dict(row, **changes), spec)
    # the time, not the memory, is checked: the engines' own memory use is theirs
    cmd = [ztrain, "plan", spec, "--world", str(row["gpus"]), "--gpu", profile_of(row["gpu"]),
           "--calibration", calibration, "--device-memory", "100000GB", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"ztrain plan failed ({p.returncode}): {p.stderr.strip()[-300:]}")
    return json.loads(p.stdout)


def as_the_engine_runs_it(ztrain, row, spec, calibrations):
    """The row's step as its engine runs it (row["kernels"], from its source): ztrain's plan of the
    layout (its collectives, their overlap, the GEMMs at the calibration's efficiency), with
    - attention at the measured efficiency of the kernel the engine calls (on Hopper: PyTorch's
      FlashAttention-2 backend or cuDNN, both measured on the H200; elsewhere no measurement tells
      them apart, and the cuDNN figures stand);
    - an eager engine's layers moving the bytes its own ops move (bench/eager_traffic.py's count) in
      place of ztrain's fused kernels' (the plan's per-layer difference), at the plan's own price a
      byte of memory-bound work;
    - torchtitan's op-level checkpointing rerunning every second matrix product of the forward, at
      the plan's price a GEMM FLOP (and, eager, its other ops, at the price a byte); not its
      sequence-parallel all-gathers, which it also reruns (their output is not saved);
    - synchronous tensor parallelism: the tensor group's collectives that ztrain hides (behind
      compute, or another group's wait), waited for instead.
    Returns (tokens/s per GPU, the plan, what was added in words)."""
    k = kernels_of(row)
    if k.get("attention", "cudnn") not in calibrations:
        raise ValueError(f"kernels.attention {k['attention']!r}: one of {', '.join(calibrations)}")
    hopper = profile_of(row["gpu"]) in HOPPER
    attention = k.get("attention", "cudnn") if hopper else "cudnn"
    p = plan(ztrain, row, spec, calibrations[attention])
    step = p["predicted_step_ms"] / 1e3
    L, T = row["n_layer"], row.get("tensor") or 1
    group_tokens = p["tokens_per_s_per_gpu"] * step * T  # a tensor group's tokens a step
    kinds = p["compute_by_kind"]
    extra, why = 0.0, [f"attention: {attention if hopper else 'cudnn (not Hopper)'}"]
    eager = k.get("eager_layer")
    rerun_forward = bool(k.get("op_sac")) or row.get("recompute") == "full"
    if eager or k.get("op_sac"):
        traffic = eager_traffic.count(eager or "torchtitan-llama", row["d_model"], row["n_head"],
                                      row.get("n_kv_head") or row["n_head"], row["d_ff"])
    if eager:
        engine_bytes = traffic["forward"] * (2 if rerun_forward else 1) + traffic["backward"]  # a token, a layer
        # ztrain's bytes a token of one layer: the other ops' bytes of a layer more, at the row's
        # micro-batch and at twice it (and twice the global batch: as many micro-steps); what a
        # layer adds once a micro-step or a step (its optimizer update, ZeRO's copies) cancels out
        micro = row.get("micro_batch") or 1
        global_batch = row.get("global_batch") or micro * (row["gpus"] // T)

        def layer_bytes(times):
            other = [plan(ztrain, row, spec, calibrations[attention], n_layer=n, micro_batch=micro * times,
                          global_batch=global_batch * times)["compute_by_kind"]["other"]["bytes"] for n in (L, L + 1)]
            return other[1] - other[0]  # rank 0's, a step

        # a token of the whole layer, as the engine's count is (rank 0 holds 1/T of it)
        ztrain_bytes = (layer_bytes(2) - layer_bytes(1)) / (group_tokens / T)
        s_per_byte = kinds["other"]["ms"] / 1e3 / kinds["other"]["bytes"]
        added = L * group_tokens / T * (engine_bytes - ztrain_bytes) * s_per_byte
        extra += added
        why.append(f"eager {eager}: {engine_bytes / 1e6:.2f} MB a token a layer, "
                   f"ztrain {ztrain_bytes / 1e6:.2f} ({1e3 * added:+.0f} ms)")
    if k.get("op_sac"):
        s_per_flop = kinds["gemm"]["ms"] / 1e3 / kinds["gemm"]["flops"]
        added = L * group_tokens * traffic["op_sac_recompute_matmul_flops"] / T * s_per_flop
        extra += added
        why.append(f"op SAC reruns every second product ({1e3 * added:+.0f} ms)")
    if k.get("tp_overlap") is False and "tp" in p.get("communication_by_group", {}):
        tp = p["communication_by_group"]["tp"]
        added = (tp["ms"] - tp["exposed_ms"]) / 1e3
        extra += added
        why.append(f"synchronous TP ({1e3 * added:+.0f} ms)")
    return p["tokens_per_s_per_gpu"] * step / (step + extra), p, "; ".join(why)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ztrain", required=True)
    ap.add_argument("--runs", default=os.path.join(ROOT, "bench", "published_runs.json"))
    cal_dir = os.path.join(ROOT, "bench", "calibration")
    ap.add_argument("--calibration", default=os.path.join(cal_dir, "h200-pytorch-cudnn-attention.json"),
                    help="ztrain's kernels (and engines calling cuDNN attention)")
    ap.add_argument("--flash-calibration", default=os.path.join(cal_dir, "h200-pytorch-flash-attention.json"),
                    help="engines calling FlashAttention-2, on Hopper")
    ap.add_argument("--markdown", action="store_true", help="print the table for docs/measured.md")
    a = ap.parse_args()
    calibrations = {"cudnn": a.calibration, "flash": a.flash_calibration}
    with open(a.runs) as f:
        rows = json.load(f)["runs"]
    failures, expect = testlib.checks()
    table = []
    with tempfile.TemporaryDirectory(prefix="zt_published_") as work:
        for i, row in enumerate(rows):
            if row.get("kernels") is not None:  # the rules for rows without an entry agree with those written out
                written, ruled = row["kernels"], kernels_of(dict(row, kernels=None))
                keys = ["eager_layer", "op_sac", "tp_overlap"] + (["attention"] if profile_of(row.get("gpu")) in HOPPER else [])
                for key in keys:
                    says, rule = written.get(key), ruled.get(key)
                    same = says == rule or (key != "tp_overlap" and not says and not rule)  # None and False alike
                    expect(same, f"{row['engine']}: {row['model']}: kernels.{key} is {says!r}, "
                                 f"the engine's rule says {rule!r}")
            label = (f"{row['engine']}: {row['model']}, {row.get('gpus')} x {row.get('gpu')}, "
                     f"T{row.get('tensor') or 1} {row.get('sharding')}, seq {row.get('seq_len')}, "
                     f"micro-batch {row.get('micro_batch')}" + (", torch.compile" if row.get("compile") else ""))
            skip = why_not(row)
            if skip:
                table.append((label, row.get("tokens_per_s_per_gpu"), None, None, None, f"skipped: {skip}"))
                continue
            spec = os.path.join(work, f"row{i}.toml")
            try:
                ztrain_kernels = plan(a.ztrain, row, spec, a.calibration)["tokens_per_s_per_gpu"]
                predicted, p, how = as_the_engine_runs_it(a.ztrain, row, spec, calibrations)
            except RuntimeError as e:
                expect(False, f"{label}: {e}")
                table.append((label, row["tokens_per_s_per_gpu"], None, None, None, "plan failed"))
                continue
            ratio = predicted / row["tokens_per_s_per_gpu"]
            expect(abs(ratio - 1) <= TOLERANCE,
                   f"{label}: predicted {predicted:.0f} tokens/s per GPU, published {row['tokens_per_s_per_gpu']}: "
                   f"ratio {ratio:.2f} (limit 1 +- {TOLERANCE})")
            stalls = "; ".join(f"{s['what']} {s['ms']:.0f} ms" for s in p.get("stalls", [])[:1])
            table.append((label, row["tokens_per_s_per_gpu"], predicted, ratio,
                          ztrain_kernels / row["tokens_per_s_per_gpu"],
                          how + (f"; waits: {stalls}" if stalls else "")))
    if a.markdown:
        print("| run (engine: model, GPUs, layout) | published tokens/s per GPU | predicted as the engine runs it "
              "| ratio | ratio with ztrain's kernels | how |")
        print("|---|---|---|---|---|---|")
    for label, pub, pred, ratio, ours, note in table:
        cell = lambda v, f: "" if v is None else format(v, f)
        if a.markdown:
            print(f"| {label} | {pub} | {cell(pred, '.0f')} | {cell(ratio, '.2f')} | {cell(ours, '.2f')} | {note} |")
        else:
            print(f"{label}: published {pub}, predicted {cell(pred, '.0f') or '-'}, ratio {cell(ratio, '.2f') or '-'} "
                  f"(ztrain's kernels: {cell(ours, '.2f') or '-'}; {note})")
    priced = [r for r in table if r[3] is not None]
    if eager_traffic is None and not failures and len(priced) < 8:
        print(f"SKIP: {len(priced)} published runs within {int(TOLERANCE * 100)}%; the eager engines' rows need "
              f"PyTorch: {NO_TORCH}")
        return testlib.SKIP
    expect(len(priced) >= 8, f"only {len(priced)} published runs priced (at least 8)")
    return testlib.report(failures, f"{len(priced)} published runs predicted within {int(TOLERANCE * 100)}%")


if __name__ == "__main__":
    sys.exit(main())
