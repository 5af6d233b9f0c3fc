#!/usr/bin/env bash
# The GPU check: run on a machine with the NVIDIA driver, the CUDA toolkit, CMake and Python, but
# none of ztrain's other dependencies and no network. Builds, with nvcc and the host compiler only,
# the CUDA backend, the CPU reference backend (without BLAS) and three check programs, then runs:
#   1. test-backend-ops: every op on CUDA vs the CPU backend in fp32, bf16 and fp16
#      (tests/cuda/test_backend_ops.cpp)
#   2. GPT-2 parity: forward, every gradient and 5 AdamW steps, CUDA vs CPU, at odd sizes, in fp32,
#      bf16 and fp16 (the CPU backend emulates the 16-bit storage rounding)
#   3. the cuBLASLt GEMM ceiling (bf16, fp32, tf32), the fused attention's TFLOP/s (bf16 on tensor
#      cores, fp32 on CUDA cores), and GPT-2 124M bf16 training throughput (tokens/s, step time,
#      peak memory, MFU against 989 TFLOP/s bf16)
#   4. ZeRO-3 against ZeRO-0 at world size 1 (GPT-2 124M step time through the ParamStore)
# and writes everything to bench/results/gpu_check-<UTC time>.json (and $OUT if set).
#   tools/gpu_check.sh [--quick]     (--quick: 5 timed steps instead of 30)
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS=30
[ "${1:-}" = "--quick" ] && STEPS=5
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
B=build/gpu_check
mkdir -p "$B" bench/results
log() { echo "gpu_check: $*" >&2; }

arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
[ -n "$arch" ] || arch=90
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
log "GPU: ${gpu:-unknown} (sm_$arch), nvcc: $(nvcc --version | tail -1)"

CXXFLAGS=(-std=c++20 -O2 -fopenmp -DZTRAIN_NO_BLAS -I. -Itools/gpu_check/shim -I"$CUDA_HOME/include")
NVFLAGS=(-std=c++17 -O3 -arch=sm_"$arch" -I. -Itools/gpu_check/shim)
objs=()
build_failed=0
pids=()
# The libraries that need only the CUDA toolkit, from the same list CMake builds (sources.list),
# plus the run-time backend choice without spdlog. Every translation unit compiles in parallel
# (the check's time is mostly the build otherwise).
srcs=$(awk '$1 == "base" || $1 == "cpu" || $1 == "model" || $1 == "cuda" { print $2 }' sources.list)
for f in $srcs tools/gpu_check/backend_select.cpp; do
  o="$B/$(echo "$f" | tr / _).o"
  case "$f" in
    *.cu) nvcc "${NVFLAGS[@]}" -c "$f" -o "$o" & pids+=($!) ;;
    *) g++ "${CXXFLAGS[@]}" -c "$f" -o "$o" & pids+=($!) ;;
  esac
  objs+=("$o")
done
for p in "${pids[@]}"; do wait "$p" || build_failed=1; done
LIBS=(-L"$CUDA_HOME/lib64" -L"$CUDA_HOME/lib" -lcudart -lcublasLt -fopenmp)
g++ "${CXXFLAGS[@]}" tests/cuda/test_backend_ops.cpp "${objs[@]}" "${LIBS[@]}" -o "$B/test_backend_ops" || build_failed=1
g++ "${CXXFLAGS[@]}" tools/gpu_check/gpt2_cuda_check.cpp "${objs[@]}" "${LIBS[@]}" -o "$B/gpt2_cuda_check" || build_failed=1
nvcc "${NVFLAGS[@]}" tools/gpu_check/gemm_probe.cu -lcublasLt -o "$B/gemm_probe" || build_failed=1
[ $build_failed = 0 ] && log "build ok" || log "BUILD FAILED (see above)"

run() {  # name timeout command...  -> stdout to $B/name.out, exit code to $B/name.rc
  local name=$1 t=$2; shift 2
  log "running $name"
  timeout "$t" "$@" > "$B/$name.out" 2> "$B/$name.err"
  echo $? > "$B/$name.rc"
  tail -3 "$B/$name.err" >&2
}
run ops 600 "$B/test_backend_ops"
run parity 600 "$B/gpt2_cuda_check" parity
run gemm 300 "$B/gemm_probe"
run attention 300 "$B/gpt2_cuda_check" attention
run bench 900 "$B/gpt2_cuda_check" bench "$STEPS"
run zero3 600 "$B/gpt2_cuda_check" zero3 "$((STEPS / 3 + 1))"

stamp=$(date -u +%Y%m%dT%H%M%SZ)
result=bench/results/gpu_check-$stamp.json
python3 - "$B" "$result" "$gpu" "$arch" "$build_failed" <<'PY'
import json, sys, os
b, out, gpu, arch, build_failed = sys.argv[1:]
def lines(name):
    p = os.path.join(b, name + ".out")
    return open(p).read().splitlines() if os.path.exists(p) else []
def rc(name):
    p = os.path.join(b, name + ".rc")
    return int(open(p).read()) if os.path.exists(p) else None
def objs(name):
    r = []
    for l in lines(name):
        try:
            r.append(json.loads(l))
        except ValueError:
            pass
    return r
ops_lines = lines("ops")
res = {
    "gpu": gpu, "sm": arch, "build_ok": build_failed == "0",
    "ops": {"exit": rc("ops"), "summary": ops_lines[-1] if ops_lines else None,
            "failed": [l.strip() for l in ops_lines if l.rstrip().endswith("FAIL")]},
    "parity": {"exit": rc("parity"), "result": objs("parity")},
    "gemm": {"exit": rc("gemm"), "result": objs("gemm")},
    "attention": {"exit": rc("attention"), "result": objs("attention")},
    "bench": {"exit": rc("bench"), "result": objs("bench")},
    "zero3_overhead": {"exit": rc("zero3"), "result": objs("zero3")},
}
json.dump(res, open(out, "w"), indent=1)
print(json.dumps(res, indent=1))
PY
[ -n "${OUT:-}" ] && cp "$result" "$OUT/" 2>/dev/null
log "results in $result"
