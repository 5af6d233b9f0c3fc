#!/usr/bin/env python3
"""Mutation checks: each plants one bug the emulated device exists to catch into a copy of one
CUDA source (the build compiles the copy into a plugin of its own, libztrain_cuda_emu_mutant_NAME.so,
from tests/CMakeLists.txt) and requires the emulated run to fail the way it must.

usage: mutations.py write NAME SOURCE_ROOT OUT   (the build: writes the mutated copy)
       mutations.py check BIN_DIR                (ctest: runs every check, and the controls)
"""
import os
import re
import subprocess
import sys

FA2 = "engine/backend/cuda/attention_fa2.cu"
OPS_ATTENTION = ("ops", {"ZTRAIN_OPS_SECTIONS": "attention", "ZTRAIN_OPS_DTYPES": "bf16"})
# each warp to its next barrier before the next starts: under the other orders every warp reaches
# a warp collective before any goes past it, which hides a barrier missing between warps
OPS_ATTENTION_WARPS = ("ops", {**OPS_ATTENTION[1], "ZTRAIN_EMU_SCHEDULE": "warps"})

# name: (source, text to find (its first occurrence), replacement, how to run, what must show)
MUTATIONS = {
    # FP8 linear forward: the weight's quantization scale given to cuBLASLt instead of its inverse
    "fp8_scale_not_inverted": ("engine/backend/cuda/fp8_linear.cu",
                               "  a.a_scale = w_scales + 1, a.b_scale = r.scales(0) + 1;  // the inverse scales",
                               "  a.a_scale = w_scales, a.b_scale = r.scales(0) + 1;",
                               ("ops", {"ZTRAIN_OPS_SECTIONS": "fp8", "ZTRAIN_OPS_DTYPES": "bf16"}),
                               r"bf16 matmul_forward_fp8 64x32x48 .*FAIL"),
    # the barrier after the cp.async wait: warps read K/V chunks other warps have not landed yet
    "fa2_no_syncthreads": (FA2, "    cp_async_wait<1>();  // all but the newest group: tile j is in\n    __syncthreads();\n",
                           "    cp_async_wait<1>();  // all but the newest group: tile j is in\n",
                           OPS_ATTENTION, r"bf16 attention_forward .*FAIL"),
    # no wait for the tile's cp.async group: its shared memory is still poison when read
    "fa2_no_cp_async_wait": (FA2, "    cp_async_wait<1>();  // all but the newest group: tile j is in\n", "",
                             OPS_ATTENTION, r"bf16 attention_forward .*FAIL"),
    # the next K/V tile loaded one tile pair past the dynamic shared allocation
    "fa2_shared_tile_past_end": (FA2, "      T* nK = tiles + ((j + 1) % 2) * 2 * kTile;",
                                 "      T* nK = tiles + ((j + 1) % 2 + 2) * 2 * kTile;",
                                 OPS_ATTENTION, r"wrote shared memory at byte \d+ of its dynamic shared memory, past the"),
    # ldmatrix's row addresses given by the wrong lanes: each B fragment of K holds the next key's row
    "fa2_ldmatrix_wrong_row": (FA2, "  ldmatrix<4>(b, tile + (n0 + lane % 8) * kLd + k0 + (lane / 8) * 8);",
                               "  ldmatrix<4>(b, tile + (n0 + (lane + 1) % 8) * kLd + k0 + (lane / 8) * 8);",
                               OPS_ATTENTION, r"bf16 attention_forward .*FAIL"),
    # V read without .trans: P V's B fragments come out transposed
    "fa2_ldmatrix_no_trans": (FA2, "  ldmatrix<4, true>(b, tile + (k0 + (i % 2) * 8 + lane % 8) * kLd",
                              "  ldmatrix<4>(b, tile + (k0 + (i % 2) * 8 + lane % 8) * kLd",
                              OPS_ATTENTION, r"bf16 attention_forward .*FAIL"),
    # the causal mask skipped on tiles that cross the diagonal (tested against the warp's last row,
    # not its first)
    "fa2_mask_off_diagonal": (FA2, "    } else if (k0 + kKeys - 1 > w0 || k0 < warp_first_last) {  // on the diagonal or a document's start",
                              "    } else if (k0 + kKeys - 1 > warp_last || k0 < warp_first_last) {",
                              OPS_ATTENTION, r"bf16 attention_forward .*FAIL"),
    # packed documents: the forward's mask keeps the causal bound but drops the document's start, so
    # a row attends to the documents before its own
    "fa2_docs_mask_off": (FA2, "              v = key <= (i < 2 ? r0 : r1) && key >= rf[m][i / 2] ? v * scale_log2 : -INFINITY;",
                          "              v = key <= (i < 2 ? r0 : r1) ? v * scale_log2 : -INFINITY;",
                          ("ops", {"ZTRAIN_OPS_SECTIONS": "documents", "ZTRAIN_OPS_DTYPES": "bf16"}),
                          r"bf16 attention_forward B2 T200 C128 NH2 NKV1 documents .*FAIL"),
    # no barrier between the dS^T tile's stores and the 5-unit backward's dQ reads of it: warps read
    # keys other warps have not written yet
    "fa2_dq_no_barrier": (FA2, "      __syncthreads();  // the whole tile's dS^T, all 64 keys, before any warp's dQ reads it\n",
                          "", OPS_ATTENTION_WARPS, r"bf16 attention_backward B.*FAIL"),
    # the forward launched over 48 KB of dynamic shared memory without raising the attribute
    "fa2_no_shared_attribute": (FA2, "  auto kernel = attention_forward_fa2_kernel<T, HS, kDocs>;\n  allow_smem(kernel, smem);\n",
                                "  auto kernel = attention_forward_fa2_kernel<T, HS, kDocs>;\n",
                                OPS_ATTENTION, r"asks \d+ bytes of dynamic shared memory; its "
                                r"cudaFuncAttributeMaxDynamicSharedMemorySize allows 49152"),
    # an off-by-one bound in add: the thread at i == n reads and writes one vector past the end
    "add_off_by_one": ("engine/backend/cuda/elementwise.cu",
                       "  if (i >= n) return;\n  float x[V], y[V];", "  if (i > n) return;\n  float x[V], y[V];",
                       ("driver", ["add", "64"], {}),
                       r"out-of-bounds access at 0x[0-9a-f]+, 0 bytes past the end of the 256-byte device allocation"
                       r" at 0x[0-9a-f]+ in kernel zt::cuda::\(anonymous namespace\)::add_kernel<4>"),
    # the same bug where the allocation's end is not a page boundary: the redzone shows it
    "add_off_by_one_redzone": ("engine/backend/cuda/elementwise.cu",
                               "  if (i >= n) return;\n  float x[V], y[V];", "  if (i > n) return;\n  float x[V], y[V];",
                               ("driver", ["add", "7"], {}),
                               r"kernel zt::cuda::\(anonymous namespace\)::add_kernel<1> wrote at byte \d+ past the end "
                               r"of the 28-byte device allocation"),
    # the compute stream does not wait for the pinned upload on the copy stream
    "upload_no_stream_wait": ("engine/backend/cuda/cuda_backend.cu",
                              "    ZT_CUDA_CHECK(cudaStreamWaitEvent(stream_, done, 0));\n    return ticket;",
                              "    return ticket;",
                              ("driver", ["upload"], {"ZTRAIN_EMU_COPY_DELAY_MS": "200"}),
                              r"WRONG: element \d+ is .* after the upload and the scale"),
    # a race only another thread order shows: without the barrier, threads that run before thread 0
    # overwrite the target logit with its gradient before thread 0 reads it for the loss (in index
    # order thread 0 reads first and the result is right: the race check's second order catches it)
    "crossentropy_no_barrier_race": ("engine/backend/cuda/crossentropy.cu",
                                     "  __syncthreads();  // the target logit is read before it is overwritten\n", "",
                                     ("ops", {"ZTRAIN_OPS_SECTIONS": "crossentropy", "ZTRAIN_OPS_DTYPES": "fp32",
                                              "ZTRAIN_EMU_SCHEDULE": "reverse"}),
                                     r"fp32 softmax_crossentropy loss .*FAIL"),
    # the padding columns (the vocabulary padded for tensor parallelism) let into the softmax: with
    # no -inf bias on the head's logits, only the loss keeps them out
    "crossentropy_padding_in_softmax": ("engine/backend/cuda/crossentropy.cu",
                                        "      if (i + k >= real || x[k] == -INFINITY) continue;",
                                        "      if (x[k] == -INFINITY) continue;",
                                        ("ops", {"ZTRAIN_OPS_SECTIONS": "crossentropy", "ZTRAIN_OPS_DTYPES": "fp32"}),
                                        r"fp32 softmax_crossentropy loss N5 V1024 real 1000 .*FAIL"),
}
# the plugin each mutant shares (the two add checks are one mutant)
PLUGIN = {"add_off_by_one_redzone": "add_off_by_one"}


def write(name, root, out):
    src, find, repl = MUTATIONS[name][:3]
    text = open(os.path.join(root, src)).read()
    if find not in text:
        sys.exit(f"mutations.py: the text {name} mutates is no longer in {src}; update the mutation")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write(f"// {src} with the bug '{name}' planted (tests/cuda_emu/mutations.py)\n")
        f.write(text.replace(find, repl, 1))


def run(bin_dir, plugin, how):
    env = dict(os.environ, ZTRAIN_CUDA_PLUGIN=os.path.join(bin_dir, plugin))
    if how[0] == "ops":
        cmd, extra = [os.path.join(bin_dir, "test_backend_ops_cuda")], how[1]
    else:
        cmd, extra = [os.path.join(bin_dir, "mutant_driver")] + how[1], how[2]
    env.update(extra)
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    return p.returncode, p.stdout


def check(bin_dir):
    failed = False
    # controls: the unmutated plugin passes the driver's checks (the ops are the race check's)
    for how in [("driver", ["add", "64"], {}), ("driver", ["add", "7"], {}),
                ("driver", ["upload"], {"ZTRAIN_EMU_COPY_DELAY_MS": "200"})]:
        rc, out = run(bin_dir, "libztrain_cuda_emu.so", how)
        ok = rc == 0 and "ok" in out
        print(f"control {' '.join(how[1])}: {'ok' if ok else 'FAIL'}")
        if not ok:
            print(out[-2000:])
            failed = True
    # the race above is invisible in index order: what the second order of the race check adds
    rc, out = run(bin_dir, "libztrain_cuda_emu_mutant_crossentropy_no_barrier_race.so",
                  ("ops", {"ZTRAIN_OPS_SECTIONS": "crossentropy", "ZTRAIN_OPS_DTYPES": "fp32",
                           "ZTRAIN_EMU_SCHEDULE": "forward"}))
    print(f"crossentropy_no_barrier_race in index order: exit {rc} ({'passes: only another order shows the race' if rc == 0 else 'caught already'})")
    for name, (src, _, _, how, expect) in MUTATIONS.items():
        plugin = f"libztrain_cuda_emu_mutant_{PLUGIN.get(name, name)}.so"
        rc, out = run(bin_dir, plugin, how)
        m = re.search(expect, out)
        caught = rc != 0 and m is not None
        shown = m.group(0) if m else (out.strip().splitlines() or ["(no output)"])[-1]
        print(f"mutation {name}: exit {rc}, {'caught' if caught else 'NOT CAUGHT'}: {shown[:240]}")
        if not caught:
            print(out[-3000:])
            failed = True
    print("FAIL" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(check(sys.argv[2]))
