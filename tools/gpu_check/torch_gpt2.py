#!/usr/bin/env python3
"""The baseline for ztrain's GPT-2 124M tokens/s: the same model trained by PyTorch as people
usually do it (nanoGPT's recipe): bf16 autocast with fp32 weights, scaled_dot_product_attention
(the flash kernel on Hopper), fused AdamW, optionally torch.compile. Random tokens, like
gpt2_cuda_check's bench; GPT-2 124M: 12 layers, d_model 768, 12 heads, seq_len 1024, vocabulary
50304 (GPT-2's 50257 padded, as nanoGPT and llm.c do).

Prints one JSON line: {"check": "pytorch_gpt2_124m", "tokens_per_s", "step_ms", ...}.
  torch_gpt2.py [--batch 16] [--steps 20] [--compile] [--device cuda]
  torch_gpt2.py --tiny --device cpu --steps 2     (the plumbing, on a CPU: gpu_check --dry-run)
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0: flash / memory-efficient kernels
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # older torch (the dry run's CPU reference): the same function, materialized
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            y = att.softmax(-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, d, vocab, seq_len):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq_len, d)
        self.h = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="2 layers, d_model 64, seq_len 64, vocab 512")
    a = ap.parse_args()
    shape = dict(n_layer=2, n_head=2, d=64, vocab=512, seq_len=64) if a.tiny else \
        dict(n_layer=12, n_head=12, d=768, vocab=50304, seq_len=1024)
    dev = torch.device(a.device)
    torch.manual_seed(1)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model = GPT(**shape).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                fused=dev.type == "cuda")
        fused = dev.type == "cuda"
    except TypeError:  # torch without fused AdamW
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
        fused = False
    step_fn = torch.compile(model) if a.compile else model
    B, T = a.batch, shape["seq_len"]
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, shape["vocab"], (B, T), generator=g).to(dev)
    y = torch.randint(0, shape["vocab"], (B, T), generator=g).to(dev)
    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16)

    def step():
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t_first = time.perf_counter()
    for _ in range(a.warmup):  # includes torch.compile's compilation
        loss = step()
    sync()
    warmup_s = time.perf_counter() - t_first
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    sync()
    sec = (time.perf_counter() - t0) / a.steps
    # ztrain's one FLOP count (engine/observe/throughput.h): 6 x the matrix products' weights (the
    # linear layers and the tied head, counted once) + 6 L C T for causal attention
    matmul_params = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    flops_per_token = 6 * matmul_params + 6 * shape["n_layer"] * T * shape["d"]
    out = {"check": "pytorch_gpt2_124m" if not a.tiny else "pytorch_gpt2_tiny", "torch": torch.__version__,
           "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "compiled": a.compile,
           "fused_adamw": fused, "sdpa": hasattr(F, "scaled_dot_product_attention"), "micro_batch": B,
           "seq_len": T, "params": n_params, "warmup_s": round(warmup_s, 2), "step_ms": round(sec * 1e3, 2),
           "tokens_per_s": round(B * T / sec), "model_tflops": round(flops_per_token * B * T / sec / 1e12, 2),
           "final_loss": round(float(loss), 4)}
    if dev.type == "cuda":
        out["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)
    print(json.dumps(out), flush=True)
    return 0 if math.isfinite(float(loss)) else 1


if __name__ == "__main__":
    sys.exit(main())
