#!/usr/bin/python3
"""The device-memory traffic of a PyTorch engine's transformer layer run eagerly (no torch.compile):
each ATen op's bytes read and written, counted as the op runs, per token of one layer, leaving out
the matrix products and attention (the planner prices those as kernels; what is counted here are
the norms, rotary embeddings, activations, casts, residual adds and copies that an eager engine
runs as separate kernels, each a trip through device memory).

bench/published_runs.py prices the published runs of eager PyTorch engines with it: ztrain's
planner counts ztrain's fused kernels, and an eager engine moves several times those bytes.

The layers, as the engines write them:
- torchtitan's Llama (tools/gpu_check/torch_llama_layer.py's Layer: RMSNorm in fp32 then cast,
  rotary embeddings through complex numbers, key/value heads repeated, SwiGLU);
- llm-foundry's MPT block (low-precision LayerNorm, one fused qkv projection, GELU MLP, no biases;
  attn_impl flash: q, k and v gathered by the padding's indices and the output scattered back, as
  llm-foundry's flash_attn_fn calls flash-attn's bert_padding around the varlen kernel).
Attention itself runs as one kernel (Attention below) reading and writing the layout the GPU's
fused kernels do: its bytes are apart, as the matrix products' are.

Counted on the CPU in bf16 with torch's dispatch mode, at the layer's sizes divided by `shrink` and
by shrink / 2: a token's bytes are linear in d_model, d_ff and the head size plus a few that are
not (a row's index or mean), and the two counts give the full layer's (checked against a count at
full size: tests/plan/eager_traffic.py). A tensor an op both reads and writes in place counts
once; views count nothing; a broadcast dimension counts one element.

  bench/eager_traffic.py --layer torchtitan-llama --d-model 4096 --n-head 32 --n-kv-head 8 --d-ff 14336
  -> {"forward": bytes a token, "backward": bytes a token, "ops": {...}}
"""
import argparse
import collections
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "gpu_check"))
import torch_llama_layer  # noqa: E402  (torchtitan's layer, as the GPU check times it)

# ops that move no data: views, metadata, allocations (an allocation's first write is its producer's;
# a fill or zero is a write of its own and counts)
FREE = {"view", "_unsafe_view", "reshape", "_reshape_alias", "transpose", "t", "expand", "permute", "as_strided",
        "unsqueeze", "squeeze", "slice", "select", "view_as_complex", "view_as_real", "alias", "detach", "split",
        "unbind", "split_with_sizes", "chunk", "empty", "empty_like", "empty_strided", "new_empty",
        "new_empty_strided", "is_same_size", "_conj", "conj", "lift_fresh"}
MATMUL = {"mm", "addmm", "bmm", "matmul", "baddbmm"}
_in_attention = [0]  # > 0 while Attention runs: its ops are the fused kernel's, priced by the planner


def distinct_elements(t):
    """The elements a tensor addresses: a broadcast (stride 0) dimension reads one, however long."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        n *= size if stride != 0 else 1
    return n


def storage_bytes(tensors):
    """Bytes of the tensors, each storage once (an op reading one tensor twice reads it once)."""
    seen, moved = set(), 0
    for t in tensors:
        key = (t.data_ptr(), t.numel(), t.dtype)
        if key not in seen:
            seen.add(key)
            moved += distinct_elements(t) * t.element_size()
    return moved


class Traffic(TorchDispatchMode):
    """Bytes each op reads and writes, by op; the attention kernel's (Attention) and the matrix
    products apart. An in-place op reads and writes its tensor: both count."""

    def __init__(self):
        super().__init__()
        self.bytes = collections.Counter()
        self.matmul_flops = []  # each matrix product's FLOPs, in call order

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0].rstrip("_")
        if name in FREE:
            return out
        tensors = lambda tree: [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]
        moved = storage_bytes(tensors((args, kwargs))) + storage_bytes(tensors(out))
        kind = "attention" if _in_attention[0] else "matmul" if name in MATMUL else name
        if kind == "matmul":  # (M, K) x (K, N), batched or not: 2 M N K a matrix
            a, b = [t for t in args if isinstance(t, torch.Tensor)][-2:]  # mm(a, b), addmm(bias, a, b), bmm(a, b)
            self.matmul_flops.append(2.0 * a.numel() * b.shape[-1])
        self.bytes[kind] += moved
        return out


def _causal_scores(q, k):  # (B, H, T, T) softmax of the causal scores
    T = q.shape[2]
    s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    return s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)


def _heads_last(t):  # a (B, H, T, hs) tensor laid out as (B, T, H, hs) rows, as the fused kernels write it
    return t.transpose(1, 2).contiguous().transpose(1, 2)


class Attention(torch.autograd.Function):
    """Causal attention as a fused kernel (SDPA's flash backend, flash-attn) does it: q, k, v
    (B, H, T, hs) read from (B, T, H, hs) rows, the output and the gradients written in that
    layout, so the engine's transposes around it move nothing. The CPU's arithmetic inside counts
    as the kernel's."""

    @staticmethod
    def forward(ctx, q, k, v):
        _in_attention[0] += 1
        try:
            ctx.save_for_backward(q, k, v)
            return _heads_last(_causal_scores(q, k) @ v)
        finally:
            _in_attention[0] -= 1

    @staticmethod
    def backward(ctx, dy):
        _in_attention[0] += 1
        try:
            q, k, v = ctx.saved_tensors
            p = _causal_scores(q, k)
            dv = p.transpose(-2, -1) @ dy
            dp = dy @ v.transpose(-2, -1)
            ds = p * (dp - (dp * p).sum(-1, keepdim=True)) * q.shape[-1] ** -0.5
            return tuple(_heads_last(g) for g in (ds @ k, ds.transpose(-2, -1) @ q, dv))
        finally:
            _in_attention[0] -= 1


def scaled_dot_product_attention(q, k, v, is_causal=True, **_):  # torch_llama_layer's call, on Attention
    assert is_causal
    return Attention.apply(q, k, v)


class LowPrecisionLayerNorm(nn.LayerNorm):
    """llm-foundry's low_precision_layernorm: F.layer_norm on the bf16 input and weights."""

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class MptBlock(nn.Module):
    """llm-foundry's MPTBlock (norm_type low_precision_layernorm, no_bias, ffn_type mptmlp, GELU)."""

    def __init__(self, d, n_head, d_ff):
        super().__init__()
        self.n_head = n_head
        self.norm_1, self.norm_2 = LowPrecisionLayerNorm(d), LowPrecisionLayerNorm(d)
        for norm in (self.norm_1, self.norm_2):  # no_bias: the norms have no bias either
            norm.register_parameter("bias", None)
        self.Wqkv = nn.Linear(d, 3 * d, bias=False)
        self.out_proj = nn.Linear(d, d, bias=False)
        self.up_proj = nn.Linear(d, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d, bias=False)

    def forward(self, x, _cis=None):
        B, T, d = x.shape
        q, k, v = self.Wqkv(self.norm_1(x)).chunk(3, dim=2)
        # flash_attn_fn: the rows gathered by the padding's indices (flash-attn's bert_padding:
        # index_first_axis, a torch.gather), the varlen kernel, the output scattered back (pad_input)
        rows = torch.arange(B * T)
        q, k, v = (torch.gather(t.reshape(B * T, d), 0, rows[:, None].expand(B * T, d)) for t in (q, k, v))
        q, k, v = (t.view(B, T, self.n_head, d // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = Attention.apply(q, k, v).transpose(1, 2)
        padded = torch.zeros(B * T, d, dtype=x.dtype).index_put((rows,), y.reshape(B * T, d))
        x = x + self.out_proj(padded.view(B, T, d))
        return x + self.down_proj(F.gelu(self.up_proj(self.norm_2(x))))


LAYERS = ("torchtitan-llama", "llm-foundry-mpt")


def run_layer(layer, d, n_head, n_kv_head, d_ff, T):
    """One forward and backward of the layer at these sizes on T tokens: their Traffic."""
    torch.manual_seed(0)
    if layer == "torchtitan-llama":
        block = torch_llama_layer.Layer(d, n_head, n_kv_head, d_ff)
        cis = torch_llama_layer.rotary(T, d // n_head, torch.device("cpu"))
    else:
        block = MptBlock(d, n_head, d_ff)
        cis = None
    block = block.to(torch.bfloat16)
    x = torch.randn(1, T, d, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(1, T, d, dtype=torch.bfloat16)
    fwd, bwd = Traffic(), Traffic()
    had_sdpa = hasattr(F, "scaled_dot_product_attention")
    saved_sdpa = getattr(F, "scaled_dot_product_attention", None)
    F.scaled_dot_product_attention = scaled_dot_product_attention  # torchtitan's layer calls it
    try:
        with fwd:
            y = block(x, cis)
        with bwd:
            y.backward(dy)
    finally:
        if had_sdpa:
            F.scaled_dot_product_attention = saved_sdpa
        else:
            del F.scaled_dot_product_attention
    return fwd, bwd


TOKENS = 61  # tokens a count runs (any: a token's bytes do not depend on it, but for attention's)


def count(layer, d_model, n_head, n_kv_head, d_ff, shrink=8, T=TOKENS):
    """Bytes a token of one layer, forward and backward, of the ops other than matrix products and
    attention. Counted at every size divided by `shrink` and by shrink / 2 (the head count kept):
    a token's bytes are a part linear in the sizes plus a part that is not (the row indices, a
    row's mean), and the two counts give both."""
    if layer not in LAYERS:
        raise ValueError(f"layer {layer!r}: one of {', '.join(LAYERS)}")
    hs = d_model // n_head
    if shrink < 2 or shrink % 2 or d_model % n_head or hs % shrink or d_ff % shrink or (
            layer == "torchtitan-llama" and (hs // shrink) % 2):  # rotary embeddings pair the head's values
        raise ValueError(f"d_model {d_model}, {n_head} heads, d_ff {d_ff}: not divisible by shrink {shrink}")
    runs = {k: run_layer(layer, d_model // k, n_head, n_kv_head, d_ff // k, T) for k in (shrink, shrink // 2)}

    def full(key, pass_):  # the op's (None: every counted op's) bytes a token at full size
        def scaled(k):  # the count at sizes / k, times k: the linear part at full size plus k x the rest
            c = runs[k][pass_]
            return sum(v for op, v in c.bytes.items() if (op == key if key else op not in ("matmul", "attention"))) * k / T
        k1, k2 = shrink, shrink // 2
        rest = (scaled(k1) - scaled(k2)) / (k1 - k2)
        return scaled(k2) - rest * (k2 - 1)

    fwd, bwd = runs[shrink // 2]
    k = shrink // 2
    ops = {op: full(op, 0) + full(op, 1) for op in set(fwd.bytes) | set(bwd.bytes) if op not in ("matmul", "attention")}
    # torchtitan's op-level selective checkpointing saves every op's output but every second matrix
    # product's (torchtitan/models/llama/parallelize_llama.py, _apply_ac_to_transformer_block): the
    # backward reruns those products, and every other op of the forward (counted in `forward`)
    flops = lambda products: sum(products) * k * k / T  # a product's FLOPs scale with both its sizes
    return {"layer": layer, "forward": full(None, 0), "backward": full(None, 1),
            "forward_matmul_flops": flops(fwd.matmul_flops),
            "op_sac_recompute_matmul_flops": flops(fwd.matmul_flops[1::2]),
            "ops": dict(sorted(ops.items(), key=lambda kv: -kv[1]))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layer", required=True, choices=LAYERS)
    ap.add_argument("--d-model", type=int, required=True)
    ap.add_argument("--n-head", type=int, required=True)
    ap.add_argument("--n-kv-head", type=int, default=0)
    ap.add_argument("--d-ff", type=int, required=True)
    ap.add_argument("--shrink", type=int, default=8)
    a = ap.parse_args()
    print(json.dumps(count(a.layer, a.d_model, a.n_head, a.n_kv_head or a.n_head, a.d_ff, a.shrink), indent=1))


if __name__ == "__main__":
    main()
