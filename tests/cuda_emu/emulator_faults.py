#!/usr/bin/env python3
"""The emulated device's checks, provoked one by one (tests/cuda_emu/emulator_faults.cpp): each
case breaks one rule of the CUDA programming model and must end with the report that names it
(and a failed CUDA call), where a GPU would hang, compute garbage or fault; the control case, a
correct kernel with shuffles and a barrier, must pass.

usage: emulator_faults.py EMULATOR_FAULTS_BINARY
"""
import re
import subprocess
import sys

KERNEL = r"kernel zt::cuda::\(anonymous namespace\)::"
CASES = {  # case: (exit status, what the output must say)
    "control": (0, r"control: shuffles and barrier right"),
    "barrier_divergence": (3, KERNEL + r"barrier_divergence, block \(0,0,0\).*deadlock \(the GPU would hang\): "
                              r"threads 0-15,32-47 wait at __syncthreads; threads 16-31,48-63 wait in "
                              r"__shfl_xor_sync \(mask 0xffffffff\)"),
    "shuffle_mask_excludes_caller": (3, r"__shfl_xor_sync with mask 0x0000ffff, which does not include the calling "
                                        r"lane 16"),
    "shuffle_partial_warp": (3, r"__shfl_xor_sync with mask 0xffffffff names lanes that do not exist in warp 1 "
                                r"\(lanes 0x0000ffff\)"),
    "lanes_disagree": (3, r"(__syncwarp|__shfl_xor_sync) with mask 0xffffffff while lanes 0x[0-9a-f]+ wait in "
                          r"(__shfl_xor_sync|__syncwarp)"),
    "lane_exits_early": (3, r"thread \(5,0,0\): exited while lanes of mask 0xffffffff wait for it in __shfl_xor_sync"),
    "read_past_end": (1, r"out-of-bounds access at 0x[0-9a-f]+, 0 bytes past the end of the 4096-byte device "
                         r"allocation at 0x[0-9a-f]+ in " + KERNEL + r"read_past_end, block \(0,0,0\)"),
    "write_before_start": (3, KERNEL + r"write_before_start wrote at byte \d+ before the start of the 1000-byte device "
                              r"allocation"),
    "fault_then_event": (3, r"after the fault: cudaEventSynchronize cudaErrorLaunchFailure, cudaStreamSynchronize "
                            r"cudaErrorLaunchFailure"),
    "too_many_threads": (3, r"invalid configuration: grid \(1,1,1\), block \(2048,1,1\)"),
    "shared_over_default_limit": (3, r"asks 65536 bytes of dynamic shared memory; its "
                                     r"cudaFuncAttributeMaxDynamicSharedMemorySize allows 49152"),
    "shared_over_optin_limit": (3, r"refused 240 KB"),
    "read_unwritten_shared": (5, r"unwritten shared memory read as NaN"),
    "ldmatrix_layouts": (0, r"ldmatrix x1, x2, x4 and .trans: the PTX ISA's layouts"),
    "ldmatrix_global": (3, KERNEL + r"ldmatrix_global.*ldmatrix: lane 0's row address is not in shared memory"),
    "ldmatrix_misaligned": (3, r"ldmatrix: lane 0's row address is not 16-byte aligned"),
}


def main():
    binary = sys.argv[1]
    failed = False
    for case, (status, pattern) in CASES.items():
        p = subprocess.run([binary, case], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        m = re.search(pattern, p.stdout)
        ok = p.returncode == status and m is not None
        print(f"{case}: exit {p.returncode} (want {status}), {'ok' if ok else 'FAIL'}: "
              f"{(m.group(0) if m else p.stdout.strip())[:200]}")
        failed |= not ok
    print("FAIL" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
