#!/usr/bin/python3
"""Static evidence for the FP8 GEMM path (issue 50): the cuBLASLt descriptors ztrain builds for
GPT-2 124M's FP8 linear layers (fp8_descriptors_check on the emulated device, which dumps every
accepted cublasLtMatmul's attributes: ZTRAIN_EMU_CUBLASLT_DUMP), held against the requirements
cuBLASLt's documentation states for FP8 (cublasLtMatmul, "When A, B, C, and D Use Layouts for
FP8"), written out here on their own, not taken from the emulator:
- A transposed and B not (the "TN" format); compute type CUBLAS_COMPUTE_32F, scale type fp32;
- A and B E4M3 or E5M2, not both E5M2; D fp32, bf16, fp16 or FP8, and C as the table pairs it;
- every leading dimension and pointer 16-byte aligned, and k a multiple of 16;
- a bias epilogue's bias bf16 for a bf16 or fp32 D, fp16 for an fp16 D;
- and the recipe's own: the tensor-wide A and B scales set (the inverse quantization scales), and
  fast accumulation in the forward products (E4M3 x E4M3) only, not in the gradients' (x E5M2), as
  torchao's and Transformer Engine's recipes split it.
All 12 products (4 layers x forward, input gradient, weight gradient) must be there with their
shapes. A planted record of each kind of violation is caught.

usage: fp8_descriptors.py CHECK_PROGRAM PLUGIN
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

FP8 = {"E4M3", "E5M2"}
BYTES = {"FP32": 4, "BF16": 2, "FP16": 2, "E4M3": 1, "E5M2": 1}
C_FOR_D = {"FP32": {"FP32"}, "BF16": {"BF16"}, "FP16": {"FP16"}, "E4M3": {"BF16", "FP16"}, "E5M2": {"BF16", "FP16"}}
BIAS_FOR_D = {"FP32": {"BF16"}, "BF16": {"BF16"}, "FP16": {"FP16"}}
BIAS_EPILOGUES = {4, 2 | 4, 32 | 4, 32 | 128 | 4}  # BIAS, RELU_BIAS, GELU_BIAS, GELU_AUX_BIAS
ROWS, LAYERS = 64, [(768, 2304), (768, 768), (768, 3072), (3072, 768)]  # (in, out) of each layer


def violations(r):
    """What in one FP8 product's descriptors breaks the documented requirements."""
    v = []
    if (r["transa"], r["transb"]) != ("T", "N"):
        v.append(f"{r['transa']}{r['transb']}: FP8 needs A transposed and B not (TN)")
    if r["compute"] != "32F" or r["scale_type"] != "FP32":
        v.append(f"compute {r['compute']} / scale {r['scale_type']}: FP8 needs CUBLAS_COMPUTE_32F and fp32 scales")
    a, b, c, d = (r[m]["type"] for m in "ABCD")
    if a not in FP8 or b not in FP8:
        v.append(f"A {a}, B {b}: both must be FP8")
    elif a == "E5M2" and b == "E5M2":
        v.append("E5M2 x E5M2 is not a supported FP8 combination")
    if d not in C_FOR_D:
        v.append(f"D {d} is not an FP8 product's output type")
    elif c not in C_FOR_D[d]:
        v.append(f"C {c} with D {d}: the table pairs {sorted(C_FOR_D[d])}")
    for m in "ABCD":
        L = r[m]
        if L["order"] != "col":
            v.append(f"{m} is not column-major")
        if L["ld"] * BYTES.get(L["type"], 0) % 16:
            v.append(f"{m}'s leading dimension {L['ld']} is not a multiple of 16 bytes")
        if L["align"] % 16:
            v.append(f"{m}'s pointer is {L['align']}-byte aligned, not 16")
    k = r["A"]["rows"]  # A is (k, m) stored, transposed
    if k % 16 or r["B"]["rows"] != k:
        v.append(f"k {k} (B's {r['B']['rows']}) is not a multiple of 16 or A and B disagree")
    if r["epilogue"] in BIAS_EPILOGUES:
        bias = d if r["bias_type"] == "unset" else r["bias_type"]
        if bias not in BIAS_FOR_D.get(d, set()):
            v.append(f"bias {bias} with D {d}: the table takes {sorted(BIAS_FOR_D.get(d, set()))}")
    if not (r["a_scale"] and r["b_scale"]):
        v.append("the A or B scale is not set: the product would not be dequantized")
    forward = a == "E4M3" and b == "E4M3"
    if r.get("fast_accum") != forward:
        v.append(f"fast accumulation {'off' if forward else 'on'} in a {'forward' if forward else 'gradient'} "
                 "product: the recipe has it in the forward only")
    return v


def problem(r):
    """(m, n, k) of the product D (m, n) = A^T (m, k) B (k, n)"""
    return r["A"]["cols"], r["B"]["cols"], r["A"]["rows"]


def main():
    program, plugin = sys.argv[1:3]
    failures, expect = testlib.checks(echo=True)
    with tempfile.TemporaryDirectory() as work:
        dump = os.path.join(work, "descriptors.jsonl")
        env = dict(os.environ, ZTRAIN_CUDA_PLUGIN=plugin, ZTRAIN_EMU_CUBLASLT_DUMP=dump)
        p = subprocess.run([program], env=env, capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            print(f"FAIL: {program} exit {p.returncode}\n{p.stdout}\n{p.stderr[-2000:]}")
            return 1
        records = [json.loads(line) for line in open(dump)]
    fp8 = [r for r in records if r["A"]["type"] in FP8 or r["B"]["type"] in FP8]
    print(f"{len(records)} cublasLtMatmul calls dumped, {len(fp8)} of them FP8 products")
    for r in fp8:
        for why in violations(r):
            expect(False, f"{problem(r)}: {why}")
    # every product of every layer: forward (out, rows, in), input gradient (in, rows, out),
    # weight gradient (in, out, rows), each on its own problem
    want = {(o, ROWS, i) for i, o in LAYERS} | {(i, ROWS, o) for i, o in LAYERS} | {(i, o, ROWS) for i, o in LAYERS}
    got = {problem(r) for r in fp8}
    expect(want <= got, f"FP8 products missing: {sorted(want - got)}")
    distinct = {json.dumps({k: v for k, v in r.items() if k not in ("alpha", "beta")}, sort_keys=True) for r in fp8}
    print(f"{len(got)} FP8 problems, {len(distinct)} distinct descriptor sets, all within the documented "
          f"requirements" if not failures else "")
    # the checker catches each kind of violation, planted in a copy of a real record
    if fp8:
        plants = {
            "NN": lambda r: r.update(transa="N"),
            "E5M2 x E5M2": lambda r: (r["A"].update(type="E5M2"), r["B"].update(type="E5M2")),
            "an unaligned leading dimension": lambda r: r["A"].update(ld=r["A"]["ld"] + 8),
            "an 8-byte aligned pointer": lambda r: r["B"].update(align=8),
            "no A scale": lambda r: r.update(a_scale=False),
            "a bf16 C with an fp32 D": lambda r: (r["C"].update(type="BF16"), r["D"].update(type="FP32")),
            "an fp16 bias with a bf16 D": lambda r: r.update(epilogue=4, bias_type="FP16"),
            "fast accumulation in a gradient product": lambda r: (r["B"].update(type="E5M2"),
                                                                   r.update(fast_accum=True)),
            "a forward product without fast accumulation": lambda r: (r["A"].update(type="E4M3"),
                                                                       r["B"].update(type="E4M3"),
                                                                       r.update(fast_accum=False)),
        }
        for name, plant in plants.items():
            r = copy.deepcopy(fp8[0])
            r["D"]["type"], r["C"]["type"] = "BF16", "BF16"
            plant(r)
            found = violations(r)
            print(f"planted {name}: {found[0] if found else 'NOT caught'}")
            expect(bool(found), f"planted {name} was not caught")
    return testlib.report(failures, "ztrain's FP8 descriptors for GPT-2 124M meet cuBLASLt's documented FP8 rules")


if __name__ == "__main__":
    sys.exit(main())
