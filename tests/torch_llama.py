"""The reference Llama in PyTorch, written from Hugging Face's LlamaForCausalLM conventions (its
parameter names and nn.Linear layouts; RMSNorm in fp32; rotary embedding on the two halves of each
head, rotate_half; grouped-query attention repeating each key/value head for n_head / n_kv_head
consecutive query heads; SwiGLU MLP; no biases), independent of ztrain's code. Used by the parity
test.

The Llama-shaped families, from their published modeling files (transformers' modeling_qwen2.py,
modeling_qwen3.py, modeling_mistral.py):
- Qwen2/2.5 (qkv_bias): q_proj, k_proj and v_proj are nn.Linear(bias=True); o_proj has no bias.
- Qwen3 (qk_norm, head_dim): q_norm and k_norm are RMSNorm(head_dim) applied to each head of the
  projected q and k (`self.q_norm(self.q_proj(x).view(*shape, -1, head_dim))`) before the rotary
  embedding; heads are head_dim wide, so q_proj is (n_head * head_dim, C) and o_proj
  (C, n_head * head_dim); the attention scale is head_dim ** -0.5.
- Mistral v0.2+ (sliding_window null): Llama's computation.
`plant` puts a known bug in the reference, to show that the parity checks can tell it:
"qk norm after rope" (Qwen3's norms applied to the rotated heads), "bias on o" (Qwen2 with a
bias added to o_proj's output too), "scale from d_model" (the attention scaled by
(d_model / n_head) ** -0.5, not head_dim ** -0.5)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_gpt import attention_mask  # causal, or block-diagonal causal for packed documents


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(var + self.eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def llama3_inv_freq(inv_freq, s):
    """Llama 3.1's frequency rule, as transformers' _compute_llama3_parameters publishes it: wavelengths
    below original / high_freq_factor kept, above original / low_freq_factor divided by the factor,
    the band between interpolated. s: {factor, low_freq_factor, high_freq_factor,
    original_max_position_embeddings} (and "plant": a bug to show the parity test catches it)."""
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old = s["original_max_position_embeddings"]
    if s.get("plant") == "smooth band off by one":  # the interpolation's context one position long
        old_smooth = old + 1
    else:
        old_smooth = old
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
    smooth = (old_smooth / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) * ~(wavelen > old / low)
    return torch.where(medium, smoothed, scaled)


def rope_cos_sin(T, hs, theta, scaling=None):
    inv_freq = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs))
    if scaling is not None and scaling.get("plant") != "scaling ignored":
        inv_freq = llama3_inv_freq(inv_freq, scaling)
    freqs = torch.outer(torch.arange(T).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, hs)
    return emb.cos(), emb.sin()


class Attention(nn.Module):
    def __init__(self, C, NH, NKV, theta, scaling=None, head_dim=None, qkv_bias=False, qk_norm=False, eps=1e-6,
                 plant=None):
        super().__init__()
        self.NH, self.NKV, self.theta, self.scaling, self.plant = NH, NKV, theta, scaling, plant
        self.hs = head_dim or C // NH
        self.q_proj = nn.Linear(C, NH * self.hs, bias=qkv_bias)
        self.k_proj = nn.Linear(C, NKV * self.hs, bias=qkv_bias)
        self.v_proj = nn.Linear(C, NKV * self.hs, bias=qkv_bias)
        self.o_proj = nn.Linear(NH * self.hs, C, bias=False)
        self.qk_norm = qk_norm
        if qk_norm:
            self.q_norm = RMSNorm(self.hs, eps)
            self.k_norm = RMSNorm(self.hs, eps)

    def forward(self, x, positions=None):
        B, T, C = x.shape
        hs = self.hs
        q = self.q_proj(x).view(B, T, self.NH, hs)
        k = self.k_proj(x).view(B, T, self.NKV, hs)
        if self.qk_norm and self.plant != "qk norm after rope":
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.NKV, hs).transpose(1, 2)
        cos, sin = rope_cos_sin(T, hs, self.theta, self.scaling)
        if positions is not None:  # each token's angle at its position in its document: (B, 1, T, hs)
            cos, sin = cos[positions.long()][:, None], sin[positions.long()][:, None]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.qk_norm and self.plant == "qk norm after rope":
            q, k = self.q_norm(q), self.k_norm(k)
        rep = self.NH // self.NKV  # Hugging Face's repeat_kv
        k = k[:, :, None].expand(B, self.NKV, rep, T, hs).reshape(B, self.NH, T, hs)
        v = v[:, :, None].expand(B, self.NKV, rep, T, hs).reshape(B, self.NH, T, hs)
        # the scale is the head width's; planted: d_model / n_head's, which an explicit head_dim
        # (Mistral Nemo, Qwen3) makes another number
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.NH if self.plant == "scale from d_model" else hs)
        att = att.masked_fill(~attention_mask(T, positions), float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, self.NH * hs)
        if self.plant == "bias on o":  # v's bias (repeated to C) where Qwen2 has none
            return self.o_proj(y) + self.v_proj.bias.repeat(C // self.v_proj.bias.numel() + 1)[:C]
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, C, FF):
        super().__init__()
        self.gate_proj = nn.Linear(C, FF, bias=False)
        self.up_proj = nn.Linear(C, FF, bias=False)
        self.down_proj = nn.Linear(FF, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, C, NH, NKV, FF, theta, eps, scaling=None, **attn):
        super().__init__()
        self.input_layernorm = RMSNorm(C, eps)
        self.self_attn = Attention(C, NH, NKV, theta, scaling, eps=eps, **attn)
        self.post_attention_layernorm = RMSNorm(C, eps)
        self.mlp = MLP(C, FF)

    def forward(self, x, positions=None):
        x = x + self.self_attn(self.input_layernorm(x), positions)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, L, NH, NKV, C, FF, V, theta=10000.0, eps=1e-5, tie=False, rope_scaling=None, **attn):
        """rope_scaling: None (plain RoPE) or Llama 3.1's rule's parameters (llama3_inv_freq).
        attn: the families' options (head_dim, qkv_bias, qk_norm) and a planted bug (plant)."""
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(V, C)
        self.model.layers = nn.ModuleList([Layer(C, NH, NKV, FF, theta, eps, rope_scaling, **attn) for _ in range(L)])
        self.model.norm = RMSNorm(C, eps)
        self.tie = tie
        if not tie:
            self.lm_head = nn.Linear(C, V, bias=False)

    def forward(self, idx, targets=None, positions=None):
        """The mean cross-entropy over the positions with a target (>= 0); the logits (B, T, V)
        without targets. positions: as in torch_gpt.py (packed documents)."""
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x, positions)
        x = self.model.norm(x)
        logits = x @ self.model.embed_tokens.weight.t() if self.tie else self.lm_head(x)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1).long(), ignore_index=-1)
