#!/usr/bin/python3
"""A calibration file (tools/gpu_check.sh's calibration.json format) whose attention figures are
PyTorch's fused attention backend's, measured in the same GPU check run (its sdpa stage), in place
of ztrain's own kernels: what a well-tuned engine reaches on that GPU (FlashAttention-2 or cuDNN
attention beside the same cuBLASLt GEMMs and memory bandwidth). `ztrain plan --calibration OUT`
then predicts other engines' published runs (tests/plan/published_runs.py).

Usage: tools/calibration_with_pytorch_attention.py RESULTS.json CALIBRATION.json OUT.json [--backend cudnn]
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", help="the GPU check's results (bench/results/gpu_check-*.json)")
    ap.add_argument("calibration", help="the same run's calibration.json")
    ap.add_argument("out")
    ap.add_argument("--backend", default="cudnn", choices=["cudnn", "flash", "efficient"])
    a = ap.parse_args()
    with open(a.results) as f:
        results = json.load(f)
    with open(a.calibration) as f:
        cal = json.load(f)
    sdpa = results["stages"]["sdpa"]["result"]
    rows = [r for r in sdpa if r.get("check") == "sdpa" and r.get("backend") == a.backend]
    if not rows:
        raise SystemExit(f"{a.results}: no sdpa rows of backend {a.backend}")
    cal["attention"] = [{k: r[k] for k in ("B", "T", "heads", "head_size", "precision", "fwd_tflops", "bwd_tflops")}
                        for r in rows]
    cal["attention_backend"] = f"PyTorch scaled_dot_product_attention, {a.backend} backend"
    cal["source"] = (f"{cal.get('source', 'tools/gpu_check.sh')}; attention: {a.results} sdpa stage "
                     f"({a.backend}), by tools/calibration_with_pytorch_attention.py")
    with open(a.out, "w") as f:
        json.dump(cal, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
