#!/usr/bin/env python3
"""The GPU check's results file (tools/gpu_check.sh), rewritten after every stage so that a hang
or a crash later still leaves everything before it.

  results.py init FILE --gpu G --sm N --dry-run 0|1 --nvcc V [--device gpu|emulated]
  results.py stage FILE NAME EXIT MS LIMIT_S STDOUT STDERR   a stage's outcome and JSON lines
  results.py skip FILE NAME WHY
  results.py get FILE STAGE KEY DEFAULT                      a value from a stage's JSON lines
  results.py summary FILE                                    derived figures, and a short table
  results.py all-ok FILE                                     exit 1 unless every stage passed
"""
import json
import re
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def save(path, res):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1)
    os.replace(tmp, path)


def json_lines(path):
    out = []
    for line in open(path, errors="replace") if os.path.exists(path) else []:
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def tail(path, n):
    return open(path, errors="replace").read().splitlines()[-n:] if os.path.exists(path) else []


TUNED = re.compile(r"algorithm \d+ of \d+ by measurement, ([\d.]+) ms \(the first heuristic's ([\d.]+) ms\)")
EPILOGUE = re.compile(r"(\w+) epilogue for m \d+ n \d+ k \d+: (fused|separate kernels) by measurement \(fused ([\d.]+) "
                      r"ms, the GEMM and (?:a kernel|the column sums) ([\d.]+) ms\)")


def gemm_choices(log):
    """What the bench's cuBLASLt lines say, once per GEMM shape: the measured algorithm against the
    first heuristic's (their summed times: what the autotune gains), and each epilogue fused or not
    against its unfused kernels (what the fusions gain). The stages that ran the bench again with
    the autotune and the fusions off are gone: these are the same figures, on the real shapes."""
    tuned = [(float(a), float(b)) for a, b in TUNED.findall(log)]
    epi = EPILOGUE.findall(log)
    chosen = sum(min(float(f), float(u)) for _, _, f, u in epi)
    return {"gemms_timed": len(tuned),
            "autotune_speedup": round(sum(b for _, b in tuned) / sum(a for a, _ in tuned), 3) if tuned else None,
            "epilogues_timed": len(epi), "epilogues_fused": sum(1 for _, c, _, _ in epi if c == "fused"),
            "fusion_speedup": round(sum(float(u) for *_, u in epi) / chosen, 3) if epi and chosen else None}


def stage(path, name, code, ms, limit, out, err):
    res = load(path)
    code = int(code)
    entry = {"exit": code, "seconds": round(int(ms) / 1000, 2), "limit_s": int(limit),
             "timed_out": code in (124, 137), "signal": code - 128 if 128 < code < 160 and code != 137 else None,
             "result": json_lines(out), "stderr_tail": tail(err, 15)}
    if name == "ops":  # test-backend-ops prints one line per op, "... ok" or "... FAIL"
        lines = open(out, errors="replace").read().splitlines() if os.path.exists(out) else []
        entry["summary"] = lines[-1] if lines else None
        entry["failed"] = [l.strip() for l in lines if l.rstrip().endswith("FAIL") or "EXCEPTION" in l]
    if name == "bench":  # the GEMM choices its log gives (engine/backend/cuda/matmul.cu)
        entry["gemm_choices"] = gemm_choices(open(err, errors="replace").read() if os.path.exists(err) else "")
    entry["ok"] = code == 0
    res["stages"][name] = entry
    save(path, res)


def results(res, stage_name):
    return res["stages"].get(stage_name, {}).get("result", [])


def value(res, stage_name, key):
    for r in results(res, stage_name):
        if key in r:
            return r[key]
    return None


def summary(path):
    res = load(path)
    if res.get("device") == "emulated":  # the script's plumbing and the results' correctness, no speed
        res["derived"] = {"emulated": True,
                          "note": "emulated CUDA device at tiny sizes: every figure is a correctness or plumbing "
                                  "result; times and tokens/s say nothing about a GPU",
                          "plan_error": value(res, "bench", "plan_error"),
                          "not_measured": sorted(n for n, s in res["stages"].items() if not s.get("ok"))}
        save(path, res)
        print(f"{'stage':<16} {'exit':>5} {'seconds':>8}  result (emulated device)")
        for n, s in res["stages"].items():
            first = s.get("result", [{}])[:1]
            brief = s.get("summary") or s.get("why") or (json.dumps(first[0])[:90] if first else "")
            print(f"{n:<16} {str(s.get('exit')):>5} {s.get('seconds', 0):>8}  {brief}")
        print(f"planner vs measured peak: {res['derived']['plan_error']}; not passed: {res['derived']['not_measured']}")
        return
    ztrain, torch_eager = value(res, "bench", "tokens_per_s"), value(res, "pytorch", "tokens_per_s")
    torch_compiled = value(res, "pytorch_compile", "tokens_per_s")
    best = max([t for t in (torch_eager, torch_compiled) if t], default=None)
    bf16_ceiling = next((r["tflops"] for r in results(res, "gemm")
                         if r.get("type") == "bf16" and r.get("what", "square") == "square" and "tflops" in r), None)
    model_tflops = value(res, "bench", "model_tflops")
    res["derived"] = {
        "ztrain_tokens_per_s": ztrain,
        "pytorch_tokens_per_s": {"eager": torch_eager, "compiled": torch_compiled},
        "ztrain_vs_best_pytorch": round(ztrain / best, 3) if ztrain and best else None,
        "mfu_vs_989_tflops": value(res, "bench", "mfu_vs_989_bf16"),
        "mfu_vs_measured_gemm_ceiling": round(model_tflops / bf16_ceiling, 4) if model_tflops and bf16_ceiling else None,
        "not_measured": sorted(n for n, s in res["stages"].items() if not s.get("ok")),
    }
    choices = res["stages"].get("bench", {}).get("gemm_choices", {})
    res["derived"]["gemm_autotune_speedup"] = choices.get("autotune_speedup")  # over the summed GEMM times
    res["derived"]["fused_epilogues_speedup"] = choices.get("fusion_speedup")
    # the chunked head and loss vs the logits whole
    base = value(res, "bench_head_whole", "tokens_per_s")
    res["derived"]["head_in_chunks_speedup"] = round(ztrain / base, 3) if ztrain and base else None
    whole_peak, peak = value(res, "bench_head_whole", "peak_bytes"), value(res, "bench", "peak_bytes")
    res["derived"]["head_in_chunks_peak_saving_bytes"] = whole_peak - peak if whole_peak and peak else None
    # attention (bf16) against the GEMM ceiling, per head size and T (targets: forward >= 0.5,
    # backward >= 0.4): the default FlashAttention-2 kernels and the WMMA ones; and the default's
    # speed-up over the WMMA kernels in the same run (over the first FlashAttention-2 generation,
    # removed after b76f2b9, the H200 measured 1.28-1.76x: gpu_check-h200-20261204T192400Z.json)
    for name in ("attention", "attention_wmma"):
        for r in results(res, name):
            if r.get("precision") != "bf16" or "fwd_tflops" not in r or not bf16_ceiling:
                continue
            key = f"{name}_hs{r['head_size']}_T{r['T']}_vs_gemm_ceiling"
            res["derived"][key] = {"fwd": round(r["fwd_tflops"] / bf16_ceiling, 3),
                                   "bwd": round(r["bwd_tflops"] / bf16_ceiling, 3)}
    old_by_shape = {(r.get("head_size"), r.get("T"), r.get("precision")): r
                    for r in results(res, "attention_wmma") if "fwd_ms" in r}
    for r in results(res, "attention"):
        old = old_by_shape.get((r.get("head_size"), r.get("T"), r.get("precision")))
        if old and r.get("precision") == "bf16" and r.get("fwd_ms") and r.get("bwd_ms"):
            res["derived"][f"attention_hs{r['head_size']}_T{r['T']}_speedup_over_wmma"] = {
                "fwd": round(old["fwd_ms"] / r["fwd_ms"], 3), "bwd": round(old["bwd_ms"] / r["bwd_ms"], 3)}
    derive_round4(res, bf16_ceiling)
    save(path, res)
    print(f"{'stage':<16} {'exit':>5} {'seconds':>8}  result")
    for n, s in res["stages"].items():
        first = s.get("result", [{}])[:1]
        brief = s.get("summary") or s.get("why") or (json.dumps(first[0])[:90] if first else "")
        status = "timeout" if s.get("timed_out") else s.get("exit")
        print(f"{n:<16} {str(status):>5} {s.get('seconds', 0):>8}  {brief}")
    d = res["derived"]
    print(f"ztrain {d['ztrain_tokens_per_s']} tokens/s; PyTorch eager {torch_eager}, compiled {torch_compiled}; "
          f"ratio to the best {d['ztrain_vs_best_pytorch']}; MFU {d['mfu_vs_989_tflops']} (of 989 TFLOP/s), "
          f"{d['mfu_vs_measured_gemm_ceiling']} (of the measured GEMM ceiling)")


def derive_round4(res, bf16_ceiling):
    """the figures of the stages GPU readiness round 4 added: PyTorch's attention as the reference,
    the GEMMs at the model's shapes, memory bandwidth, the step's phases, deterministic mode's cost,
    compute-sanitizer"""
    d = res["derived"]
    # ztrain's attention against the fastest of PyTorch's fused backends on each shape
    best = {}
    for r in results(res, "sdpa"):
        if "fwd_tflops" not in r:
            continue
        key = (r["head_size"], r["T"])
        for phase in ("fwd", "bwd"):
            if r[f"{phase}_tflops"] > best.get(key + (phase,), (0, None))[0]:
                best[key + (phase,)] = (r[f"{phase}_tflops"], r["backend"])
    for r in results(res, "attention"):
        key = (r.get("head_size"), r.get("T"))
        if r.get("precision") == "bf16" and key + ("fwd",) in best:
            (bf, nf), (bb, nb) = best[key + ("fwd",)], best[key + ("bwd",)]
            d[f"attention_hs{key[0]}_T{key[1]}_vs_best_pytorch"] = {
                "fwd": round(r["fwd_tflops"] / bf, 3), "fwd_best": nf, "bwd": round(r["bwd_tflops"] / bb, 3),
                "bwd_best": nb}
    checks = [r for r in results(res, "sdpa") if r.get("check") == "attention_vs_reference"]
    d["attention_matches_fp32_reference"] = all(r.get("ok") for r in checks) if checks else None
    d["gemm_model_shapes_of_ceiling"] = {r["what"]: r["of_ceiling"] for r in results(res, "gemm")
                                         if "of_ceiling" in r} or None
    d["memory_gb_per_s"] = value(res, "gemm", "gb_per_s")
    phases = next((r for r in results(res, "bench") if r.get("check") == "bench_phases"), None)
    if phases:
        d["phases"] = {k: phases[k] for k in ("forward_ms", "backward_ms", "optimizer_ms")}
        for k in ("forward", "backward"):
            d["phases"][f"{k}_mfu_vs_989_tflops"] = round(phases[f"{k}_tflops"] / 989, 4)
            if bf16_ceiling:
                d["phases"][f"{k}_vs_gemm_ceiling"] = round(phases[f"{k}_tflops"] / bf16_ceiling, 4)
    det, base = value(res, "bench_deterministic", "step_ms"), value(res, "bench", "step_ms")
    det_batch, base_batch = value(res, "bench_deterministic", "micro_batch"), value(res, "bench", "micro_batch")
    d["deterministic_step_time_ratio"] = round(det / base, 3) if det and base and det_batch == base_batch else None
    # on text-like ids: the non-deterministic bench (atomics) first, then the deterministic one (the sort)
    text = [r for r in results(res, "bench_text") if r.get("check", "").startswith("bench_gpt2")]
    if len(text) == 2 and text[0].get("step_ms") and text[1].get("step_ms"):
        d["text_tokens"] = {"tokens_per_s": text[0].get("tokens_per_s"),
                            "deterministic_tokens_per_s": text[1].get("tokens_per_s"),
                            "deterministic_step_time_ratio": round(text[1]["step_ms"] / text[0]["step_ms"], 3)}
    d["sanitizer_errors"] = {r["tool"]: r.get("errors") for name in ("sanitizer_memcheck", "sanitizer_racecheck")
                             for r in results(res, name) if "tool" in r and "skip" not in r} or None


def calibration(path, out):
    """the measured efficiencies the planner reads (its time model: GEMMs by shape, attention,
    memory-bound ops at the measured bandwidth, the measured step), each with where it came from"""
    res = load(path)
    if res.get("device") != "gpu" or res.get("dry_run"):
        sys.exit("results.py calibration: only a GPU run's results calibrate (this one is "
                 f"{'a dry run' if res.get('dry_run') else res.get('device')})")
    d = res.get("derived", {})
    square = {r["type"]: r["tflops"] for r in results(res, "gemm")
              if r.get("check") == "gemm" and "tflops" in r and r.get("what", "square") == "square"}
    cal = {
        "source": "tools/gpu_check.sh",
        "gpu": res["gpu"], "sm": res["sm"], "nvcc": res.get("nvcc"),
        "peak_bf16_tflops_spec": 989,
        "gemm_tflops": square,
        "gemm_shapes": [{k: r[k] for k in ("m", "n", "k", "what", "tflops", "of_ceiling")}
                        for r in results(res, "gemm") if "of_ceiling" in r],
        "memory_gb_per_s": d.get("memory_gb_per_s"),
        "attention": [{k: r[k] for k in ("B", "T", "heads", "head_size", "precision", "fwd_tflops", "bwd_tflops")}
                      for r in results(res, "attention") if "fwd_tflops" in r],
        "step": {"model": "gpt2-124m", "precision": "bf16",
                 **{k: value(res, "bench", k) for k in ("micro_batch", "seq_len", "step_ms", "tokens_per_s",
                                                         "model_tflops", "mfu_vs_989_bf16")},
                 "phases_ms": {k: v for k, v in (d.get("phases") or {}).items() if k.endswith("_ms")} or None},
        # a PyTorch engine's Llama layer, eager and compiled (bench/published_runs.py prices the
        # published runs of PyTorch engines with it)
        "pytorch_llama_layer": [r for r in results(res, "torch_llama") if "layer_ms" in r] or None,
        # the FP8 linear layers' forward per shape, its casts included (the planner takes the casts
        # out at the measured bandwidth: ztrain plan's FP8 GEMM efficiency)
        "fp8_linear": [{k: r[k] for k in ("shape", "N", "C", "OC", "bf16_fwd_ms", "fp8_fwd_ms", "fwd_speedup",
                                          "bwd_speedup", "fp8_fwd_weight_copy_ms", "fp8_bwd_weight_copy_ms")
                        if k in r}
                       for r in results(res, "fp8") if r.get("check") == "fp8_linear" and "fp8_fwd_ms" in r] or None,
    }
    with open(out, "w") as f:
        json.dump(cal, f, indent=1)
        f.write("\n")


def main():
    cmd, path = sys.argv[1], sys.argv[2]
    if cmd == "init":
        args = dict(zip(sys.argv[3::2], sys.argv[4::2]))
        save(path, {"device": args.get("--device", "gpu"), "gpu": args["--gpu"], "sm": args["--sm"],
                    "dry_run": args["--dry-run"] == "1", "nvcc": args["--nvcc"], "stages": {}})
    elif cmd == "stage":
        stage(path, *sys.argv[3:10])
    elif cmd == "skip":
        res = load(path)
        res["stages"][sys.argv[3]] = {"exit": None, "ok": False, "skipped": True, "why": sys.argv[4]}
        save(path, res)
    elif cmd == "get":
        v = value(load(path), sys.argv[3], sys.argv[4])
        print(v if v is not None else sys.argv[5])
    elif cmd == "summary":
        summary(path)
    elif cmd == "calibration":
        calibration(path, sys.argv[3])
    elif cmd == "all-ok":
        res = load(path)
        bad = [n for n, s in res["stages"].items() if not s.get("ok")]
        print(f"{len(res['stages']) - len(bad)} of {len(res['stages'])} stages passed" + (f"; not: {bad}" if bad else ""))
        sys.exit(1 if bad or not res["stages"] else 0)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
