"""The reference GPT-2 in PyTorch (nanoGPT names, nn.Linear layouts, manual causal attention),
used by the parity test and the CPU training benchmark. With `positions` (B, T) (rows packed with
several documents, each token's position in its document) the attention mask is block-diagonal
causal (a token sees its own document's earlier tokens only) and the position embedding is
looked up at each token's position; targets of -1 carry no loss."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def attention_mask(T, positions=None):
    """(T, T) causal, or with positions (B, T) the (B, 1, T, T) block-diagonal causal mask: query t
    sees keys [t - positions[t], t]."""
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    if positions is None:
        return causal
    first = torch.arange(T)[None, :] - positions.long()  # (B, T): each query's document start
    keys = torch.arange(T)[None, None, :]
    return (causal[None] & (keys >= first[:, :, None]))[:, None]


class Block(nn.Module):
    def __init__(self, C, NH, FF):
        super().__init__()
        self.n_head = NH
        self.ln_1 = nn.LayerNorm(C)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(C, 3 * C)
        self.attn.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(C, FF)
        self.mlp.c_proj = nn.Linear(FF, C)

    def forward(self, x, positions=None):
        B, T, C = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=2)
        hs = C // self.n_head
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~attention_mask(T, positions), float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn.c_proj(y)
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, NH, C, FF, V, T):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(V, C)
        self.transformer.wpe = nn.Embedding(T, C)
        self.transformer.h = nn.ModuleList([Block(C, NH, FF) for _ in range(L)])
        self.transformer.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets=None, positions=None):
        """The mean cross-entropy over the positions with a target (>= 0); the logits (B, T, V)
        without targets."""
        B, T = idx.shape
        pos = torch.arange(T) if positions is None else positions.long()
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for blk in self.transformer.h:
            x = blk(x, positions)
        logits = self.transformer.ln_f(x) @ self.transformer.wte.weight.t()  # tied head
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1).long(), ignore_index=-1)
