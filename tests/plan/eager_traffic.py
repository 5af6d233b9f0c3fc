#!/usr/bin/python3
"""bench/eager_traffic.py, the byte count that prices eager PyTorch engines' published runs
(bench/published_runs.py), against hand counts:
- torchtitan's RMSNorm, op by op: x.float(), pow, mean, + eps, rsqrt, mul, type_as, * weight;
- torchtitan's op-level checkpointing reruns every second matrix product of the forward: in a Llama
  layer wk, wo and w3 (of wq, wk, wv, wo, w1, w3, w2), 2 (d kv + d d + d d_ff) FLOPs a token;
- the count at sizes divided by 8 equals the count at sizes divided by 2, scaled (the bytes are
  linear in the sizes), for both layers.
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
    eager_traffic.FREE.discard("view")
    eager_traffic.FREE.discard("_unsafe_view")
    eager_traffic.FREE.discard("expand")


def main():
    failures, expect = testlib.checks()
    # torchtitan's RMSNorm on T rows of d bf16 values, forward only
    T, d = 64, 96
    norm = torch_llama_layer.RMSNorm(d).to(torch.bfloat16)
    x = torch.randn(1, T, d, dtype=torch.bfloat16)
    count = eager_traffic.Traffic(T=10**9)  # no T x T tensor here: nothing counted as attention
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

    # op-level checkpointing's rerun products, and the count's linearity in the sizes
    d, h, kv, f = 1024, 8, 2, 2816
    for layer in eager_traffic.LAYERS:
        fine = eager_traffic.count(layer, d, h, kv, f, shrink=2)
        coarse = eager_traffic.count(layer, d, h, kv, f, shrink=8)
        for key in ("forward", "backward"):
            expect(abs(coarse[key] / fine[key] - 1) < 0.005,
                   f"{layer} {key}: {coarse[key]:.0f} bytes a token at 1/8 the sizes, {fine[key]:.0f} at 1/2")
        expect(fine["forward"] > 0 and fine["backward"] > fine["forward"], f"{layer}: {fine}")
    llama = eager_traffic.count("torchtitan-llama", d, h, kv, f)
    hs = d // h
    every_second = 2 * (d * kv * hs + d * d + d * f)
    rerun = llama["op_sac_recompute_matmul_flops"]
    if PLANT == "odd_products":
        rerun = llama["forward_matmul_flops"] - rerun  # the products checkpointing saves
    expect(abs(rerun - every_second) < 1, f"op SAC's rerun products: {rerun:.0f} FLOPs a token, by hand {every_second}")
    expect(abs(llama["forward_matmul_flops"] - 2 * (2 * d * d + 2 * d * kv * hs + 3 * d * f)) < 1,
           f"the forward's products: {llama['forward_matmul_flops']:.0f} FLOPs a token")
    return testlib.report(failures, "eager traffic: RMSNorm by hand, checkpointing's reruns, linear in the sizes")


if __name__ == "__main__":
    sys.exit(main())
