#!/usr/bin/env python3
"""PyTorch's attention as the reference for ztrain's (tools/gpu_check.sh, stage sdpa):

  speed:       scaled_dot_product_attention with each of its fused backends (flash, cuDNN, memory-
               efficient), causal, bf16, on the shapes gpt2_cuda_check's attention stage times
               (B x T = 8192 tokens, T 1024 and 4096, head size 64 and 128), CUDA events over 20
               calls after a warm-up; TFLOP/s counted as ztrain counts them (causal: half of
               4 B H T^2 hs forward, backward 2.5 times that)
  correctness: with --dump DIR, each shape ztrain dumped (gpt2_cuda_check attention under
               GPU_CHECK_ATTENTION_DUMP=DIR): its inputs through an fp32 reference (plain matmuls,
               TF32 off) and ztrain's out, log-sum-exp and dQ/dK/dV measured against it, beside the
               same error of PyTorch's own bf16 flash attention; ok when ztrain's error is within
               twice PyTorch's (or under 5e-3)

One JSON object per line on stdout. --device cpu (no CUDA): the correctness part only, without
PyTorch's fused attention when this PyTorch has none (the emulated check's tiny dumps).
"""
import argparse
import glob
import json
import math
import os
import sys

import torch

SHAPES = [(8, 1024, 12, 64), (8, 1024, 6, 128), (2, 4096, 12, 64), (2, 4096, 6, 128)]  # B, T, heads, hs


def causal_flops(B, T, H, hs):
    return 4.0 * B * H * T * T * hs / 2


def sdpa_backends():
    """name -> SDPBackend, for the PyTorch versions that have torch.nn.attention (2.3+)"""
    try:
        from torch.nn.attention import SDPBackend
    except ImportError:
        return {}
    out = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        out["cudnn"] = SDPBackend.CUDNN_ATTENTION
    return out


def timed(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps / 1e3


def speed(dev):
    if not sdpa_backends():
        print(json.dumps({"check": "sdpa", "skip": f"PyTorch {torch.__version__} has no torch.nn.attention"}))
        return
    from torch.nn.attention import sdpa_kernel
    F = torch.nn.functional
    for name, backend in sdpa_backends().items():
        for B, T, H, hs in SHAPES:
            g = torch.Generator(device=dev).manual_seed(3)
            q, k, v = (torch.randn(B, H, T, hs, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
                       for _ in range(3))
            rec = {"check": "sdpa", "backend": name, "B": B, "T": T, "heads": H, "head_size": hs, "precision": "bf16"}
            try:
                with sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    dout = torch.randn_like(out)
                    fwd = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
                    both = timed(lambda: torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True),
                                                             (q, k, v), dout))
                bwd = max(both - fwd, 1e-9)
                f = causal_flops(B, T, H, hs)
                rec.update(fwd_ms=round(fwd * 1e3, 3), bwd_ms=round(bwd * 1e3, 3),
                           fwd_tflops=round(f / fwd / 1e12, 2), bwd_tflops=round(2.5 * f / bwd / 1e12, 2))
            except Exception as e:  # a backend this GPU or build lacks: say so, go on
                rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            print(json.dumps(rec), flush=True)


def rel(a, b):
    return (a.double() - b.double()).norm().item() / max(b.double().norm().item(), 1e-30)


def reference(q, k, v, dout):
    """fp32 causal attention and its gradients; q, k, v (B, H, T, hs) fp32 leaves"""
    T, hs = q.shape[2], q.shape[3]
    s = q @ k.transpose(-1, -2) / math.sqrt(hs)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    out = torch.softmax(s, dim=-1) @ v
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    return out.detach(), lse.detach(), dq, dk, dv


def compare(dump_dir, dev):
    failed = 0
    F = torch.nn.functional
    files = sorted(glob.glob(os.path.join(dump_dir, "attention_*.json")))
    if not files:
        print(json.dumps({"check": "attention_vs_reference", "error": f"no dumps in {dump_dir}"}))
        return 1
    for meta_path in files:
        meta = json.load(open(meta_path))
        B, T, C, H = meta["B"], meta["T"], meta["C"], meta["heads"]
        hs = C // H
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[meta["dtype"]]
        raw = open(meta_path[:-5] + ".bin", "rb").read()
        n_qkv, n_out, n_lse = B * T * 3 * C, B * T * C, B * H * T
        elt = 2
        off = 0

        def take(n, dtype, nbytes):
            nonlocal off
            t = torch.frombuffer(bytearray(raw[off:off + n * nbytes]), dtype=dtype)
            off += n * nbytes
            return t

        qkv = take(n_qkv, dt, elt).view(B, T, 3, H, hs)
        out = take(n_out, dt, elt).view(B, T, H, hs)
        dqkv = take(n_qkv, dt, elt).view(B, T, 3, H, hs)
        lse = take(n_lse, torch.float32, 4).view(B, H, T)
        assert off == len(raw), f"{meta_path}: {len(raw)} bytes, expected {off}"
        # (B, T, H, hs) -> (B, H, T, hs)
        heads = lambda x: x.permute(0, 2, 1, 3).contiguous().to(dev)
        q, k, v = (heads(qkv[:, :, i]) for i in range(3))
        dout = heads(out)  # ztrain's backward ran with dout = out
        qf, kf, vf = (x.float().requires_grad_() for x in (q, k, v))
        r_out, r_lse, r_dq, r_dk, r_dv = reference(qf, kf, vf, dout.float())
        ours = {"out": rel(heads(out), r_out), "lse": rel(lse.to(dev), r_lse), "dq": rel(heads(dqkv[:, :, 0]), r_dq),
                "dk": rel(heads(dqkv[:, :, 1]), r_dk), "dv": rel(heads(dqkv[:, :, 2]), r_dv)}
        rec = {"check": "attention_vs_reference", "B": B, "T": T, "heads": H, "head_size": hs, "dtype": meta["dtype"],
               "ztrain_rel_err": {k_: float(f"{v_:.3g}") for k_, v_ in ours.items()}}
        theirs = None
        if dev != "cpu" and "flash" in sdpa_backends():  # PyTorch's flash attention, as the docstring says
            from torch.nn.attention import sdpa_kernel
            qb, kb, vb = (x.detach().clone().requires_grad_() for x in (q, k, v))
            with sdpa_kernel(sdpa_backends()["flash"]):
                o = F.scaled_dot_product_attention(qb, kb, vb, is_causal=True)
                gq, gk, gv = torch.autograd.grad(o, (qb, kb, vb), dout)
            theirs = {"out": rel(o, r_out), "dq": rel(gq, r_dq), "dk": rel(gk, r_dk), "dv": rel(gv, r_dv)}
            rec["pytorch_rel_err"] = {k_: float(f"{v_:.3g}") for k_, v_ in theirs.items()}
        ok = all(e <= max(5e-3, 2 * theirs[k_]) if theirs and k_ in theirs else e <= 2e-2 for k_, e in ours.items())
        rec["ok"] = ok
        failed += not ok
        print(json.dumps(rec), flush=True)
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", help="the directory gpt2_cuda_check attention wrote under GPU_CHECK_ATTENTION_DUMP")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-speed", action="store_true", help="the correctness part only")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"check": "sdpa", "skip": "no CUDA device visible to PyTorch"}))
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rc = 0
    if a.dump:
        rc |= compare(a.dump, a.device)
    if a.device == "cuda" and not a.no_speed:
        speed(a.device)
    return rc


if __name__ == "__main__":
    sys.exit(main())
