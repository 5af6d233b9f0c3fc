#!/usr/bin/python3
"""bench/eager_traffic.py, the byte count that prices eager PyTorch engines' published runs
(bench/published_runs.py), against hand counts:
- torchtitan's RMSNorm, op by op: x.float(), pow, mean, + eps, rsqrt, mul, type_as, * weight;
- its rotary embedding: two casts and one complex product, the views between them free;
- torchtitan's op-level checkpointing reruns every second matrix product of the forward: in a Llama
  layer wk, wo and w3 (of wq, wk, wv, wo, w1, w3, w2), 2 (d kv + d d + d d_ff) FLOPs a token;
- the count from the layer at 1/8 and 1/4 of its sizes equals the count of the layer at full
  size, for both layers.
Planted (ZT_PLANT=views_move, ZT_PLANT=odd_products): views counted as moves; the odd products
taken for the rerun ones. Each must fail this test.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import testlib  # noqa: E402

try:
    import torch
except ImportError:
    print("SKIP: PyTorch not installed (Debian: python3-torch)")
    sys.exit(testlib.SKIP)
import eager_traffic  # noqa: E402
import torch_llama_layer  # noqa: E402  (on the path eager_traffic set)

PLANT = os.environ.get("ZT_PLANT", "")
if PLANT == "views_move":
    eager_traffic.FREE -= {"view", "_unsafe_view", "_reshape_alias", "reshape", "view_as_complex", "view_as_real",
                           "expand", "transpose", "t", "permute", "slice", "select", "unsqueeze", "squeeze",
                           "as_strided", "alias"}


def main():
    failures, expect = testlib.checks()
    # torchtitan's RMSNorm on T rows of d bf16 values, forward only
    T, d = 64, 96
    norm = torch_llama_layer.RMSNorm(d).to(torch.bfloat16)
    x = torch.randn(1, T, d, dtype=torch.bfloat16)
    count = eager_traffic.Traffic()
    with count:
        norm(x)
    n = T * d
    hand = {
        "_to_copy": 2 * n + 4 * n + 4 * n + 2 * n,  # x.float(): bf16 in, fp32 out; type_as: fp32 in, bf16 out
        "pow": 4 * n + 4 * n,
        "mean": 4 * n + 4 * T,
        "add": 4 * T + 4 * T,  # + eps on the T means (the scalar is no tensor)
        "rsqrt": 4 * T + 4 * T,
        "mul": (4 * n + 4 * T + 4 * n) + (2 * n + 2 * d + 2 * n),  # y * rsqrt; (bf16) * weight
    }
    expect(dict(count.bytes) == hand, f"RMSNorm's bytes by op: counted {dict(count.bytes)}, by hand {hand}")

    # torchtitan's rotary embedding: x.float(), viewed as complex, times the (T, hs/2) complex
    # frequencies broadcast over the heads, viewed back as real, cast back: the views move nothing
    H, hs = 4, 16
    x = torch.randn(1, T, H, hs, dtype=torch.bfloat16)
    cis = torch_llama_layer.rotary(T, hs, torch.device("cpu"))
    count = eager_traffic.Traffic()
    with count:
        torch_llama_layer.apply_rotary(x, cis)
    n = T * H * hs
    hand = {"_to_copy": (2 * n + 4 * n) + (4 * n + 2 * n), "mul": 4 * n + 8 * T * hs // 2 + 4 * n}
    expect(dict(count.bytes) == hand, f"rotary's bytes by op: counted {dict(count.bytes)}, by hand {hand}")

    # the count from shrunk layers against the layer at full size, and op-level checkpointing's reruns
    d, h, kv, f = 1024, 8, 2, 2816
    T = eager_traffic.TOKENS
    for layer in eager_traffic.LAYERS:
        shrunk = eager_traffic.count(layer, d, h, kv, f, shrink=8, T=T)
        whole = eager_traffic.run_layer(layer, d, h, kv, f, T)
        for i, key in enumerate(("forward", "backward")):
            direct = sum(v for op, v in whole[i].bytes.items() if op not in ("matmul", "attention")) / T
            expect(abs(shrunk[key] / direct - 1) < 1e-3,
                   f"{layer} {key}: {shrunk[key]:.0f} bytes a token from 1/8 and 1/4 the sizes, {direct:.0f} at full size")
        expect(shrunk["forward"] > 0 and shrunk["backward"] > shrunk["forward"], f"{layer}: {shrunk}")
    llama = eager_traffic.count("torchtitan-llama", d, h, kv, f)
    hs = d // h
    every_second = 2 * (d * kv * hs + d * d + d * f)
    rerun = llama["op_sac_recompute_matmul_flops"]
    if PLANT == "odd_products":
        rerun = llama["forward_matmul_flops"] - rerun  # the products checkpointing saves
    expect(abs(rerun - every_second) < 1, f"op SAC's rerun products: {rerun:.0f} FLOPs a token, by hand {every_second}")
    expect(abs(llama["forward_matmul_flops"] - 2 * (2 * d * d + 2 * d * kv * hs + 3 * d * f)) < 1,
           f"the forward's products: {llama['forward_matmul_flops']:.0f} FLOPs a token")
    return testlib.report(failures, "eager traffic: RMSNorm by hand, checkpointing's reruns, shrunk = full size")


if __name__ == "__main__":
    sys.exit(main())
