#!/usr/bin/env python3
"""What a PyTorch engine gets from a GPU on a Llama layer (tools/gpu_check.sh, stage torch_llama):
the planner's published-runs check (bench/published_runs.py) prices torchtitan's and llm-foundry's
runs, PyTorch engines whose layers are PyTorch ops (RMSNorm, rotary embeddings and SwiGLU as
separate kernels unless compiled), with a calibration measured from cuBLASLt GEMMs and fused
attention alone. This measures the layer as those engines run it, so that their rows can be priced
with a calibration from a measurement instead of one fitted to the rows.

Llama 3.1 8B's layer (d_model 4096, 32 heads, 8 key/value heads, head size 128, d_ff 14336) as
torchtitan writes it: bf16 parameters (FSDP's param_dtype), RMSNorm in fp32 then cast, rotary
embeddings through complex numbers, scaled_dot_product_attention (causal; PyTorch picks its
backend), SwiGLU. Two layers, forward and backward, CUDA events over --reps calls after a warm-up;
eager, then torch.compile per layer (as torchtitan compiles). Model FLOPs as ztrain counts them:
6 x matmul parameters x tokens, plus causal attention (half of 4 B H T^2 hs forward, 2.5 times
that backward).

One JSON line per mode: {"check": "torch_llama_layer", "mode", "tokens", "layer_ms", "tflops",
"of_peak_bf16_989"}.
  torch_llama_layer.py [--seq 8192] [--batch 1] [--layers 2] [--reps 10] [--no-compile]
  torch_llama_layer.py --tiny --device cpu      (the plumbing, on a CPU: gpu_check --dry-run)
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight


def rotary(T, hs, device, theta=500000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, hs, 2, device=device).float() / hs))
    return torch.polar(torch.ones(T, hs // 2, device=device), torch.outer(torch.arange(T, device=device).float(), freqs))


def apply_rotary(x, cis):  # x: B, T, H, hs
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * cis[None, :, None, :]).flatten(3).type_as(x)


class Layer(nn.Module):
    def __init__(self, d, n_head, n_kv, d_ff):
        super().__init__()
        self.n_head, self.n_kv, self.hs = n_head, n_kv, d // n_head
        self.attention_norm, self.ffn_norm = RMSNorm(d), RMSNorm(d)
        self.wq = nn.Linear(d, n_head * self.hs, bias=False)
        self.wk = nn.Linear(d, n_kv * self.hs, bias=False)
        self.wv = nn.Linear(d, n_kv * self.hs, bias=False)
        self.wo = nn.Linear(n_head * self.hs, d, bias=False)
        self.w1 = nn.Linear(d, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d, bias=False)
        self.w3 = nn.Linear(d, d_ff, bias=False)

    def attention(self, x, cis):
        B, T, _ = x.shape
        q = apply_rotary(self.wq(x).view(B, T, self.n_head, self.hs), cis)
        k = apply_rotary(self.wk(x).view(B, T, self.n_kv, self.hs), cis)
        v = self.wv(x).view(B, T, self.n_kv, self.hs)
        rep = self.n_head // self.n_kv  # torchtitan repeats the key/value heads
        k, v = (t.repeat_interleave(rep, dim=2) for t in (k, v))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.x (the dry run's CPU): the same function, materialized
            att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hs)
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            y = att.softmax(-1) @ v
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))

    def forward(self, x, cis):
        h = x + self.attention(self.attention_norm(x), cis)
        z = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(z)) * self.w3(z))


def model_flops(B, T, d, n_head, n_kv, d_ff, layers):
    hs = d // n_head
    matmul = d * n_head * hs * 2 + d * n_kv * hs * 2 + 3 * d * d_ff  # q, o; k, v; w1, w2, w3
    attention_forward = 4.0 * B * n_head * T * T * hs / 2
    return layers * (6.0 * matmul * B * T + 3.5 * attention_forward)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="d_model 64, 4 heads, 2 key/value heads, seq 32")
    a = ap.parse_args()
    d, n_head, n_kv, d_ff = (64, 4, 2, 160) if a.tiny else (4096, 32, 8, 14336)
    T = 32 if a.tiny else a.seq
    dev = torch.device(a.device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    torch.manual_seed(1)
    layers = nn.ModuleList(Layer(d, n_head, n_kv, d_ff) for _ in range(a.layers)).to(dev, dtype)
    cis = rotary(T, d // n_head, dev)
    x = torch.randn(a.batch, T, d, device=dev, dtype=dtype, requires_grad=True)
    flops = model_flops(a.batch, T, d, n_head, n_kv, d_ff, a.layers)
    modes = ["eager"] + ([] if a.no_compile or not hasattr(torch, "compile") or dev.type != "cuda" else ["compile"])
    for mode in modes:
        blocks = [torch.compile(b) for b in layers] if mode == "compile" else list(layers)

        def step():
            y = x
            for b in blocks:
                y = b(y, cis)
            y.float().square().mean().backward()

        t0 = time.perf_counter()
        step()  # warm-up (and compilation)
        warm_s = time.perf_counter() - t0
        if dev.type == "cuda":
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(a.reps):
                step()
            e.record()
            torch.cuda.synchronize()
            seconds = s.elapsed_time(e) / 1e3 / a.reps
        else:
            t0 = time.perf_counter()
            for _ in range(a.reps):
                step()
            seconds = (time.perf_counter() - t0) / a.reps
        print(json.dumps({"check": "torch_llama_layer", "mode": mode, "torch": torch.__version__,
                          "shape": {"d_model": d, "n_head": n_head, "n_kv_head": n_kv, "d_ff": d_ff, "seq_len": T,
                                    "batch": a.batch, "layers": a.layers, "dtype": str(dtype).split(".")[-1]},
                          "tokens": a.batch * T, "layer_ms": round(seconds / a.layers * 1e3, 4),
                          "tflops": round(flops / seconds / 1e12, 2),
                          "of_peak_bf16_989": round(flops / seconds / 989e12, 4),
                          "first_call_s": round(warm_s, 2)}), flush=True)


if __name__ == "__main__":
    main()
