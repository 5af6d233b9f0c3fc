#!/usr/bin/env bash
# The GPU check, for a lent GPU machine (the NVIDIA driver, the CUDA toolkit and Python with
# PyTorch, but none of ztrain's other dependencies and no network) and its limits: one command of
# at most 7 minutes including the build, so that a second try fits in the device time.
#
# Builds, with nvcc and the host compiler only (16 cores: every translation unit at once), the
# CUDA backend, the CPU reference backend (without BLAS) and the check programs, then runs the
# stages in this order, each under its own time limit and all under one deadline:
#   ops        every op on CUDA vs the CPU backend, fp32/bf16/fp16, CUDA_LAUNCH_BLOCKING=1 (the
#              first failing op is named; tests/cuda/test_backend_ops.cpp)
#   parity     GPT-2 forward, gradients and 5 AdamW steps, CUDA vs CPU, at odd sizes, 3 precisions
#   gemm       the cuBLASLt GEMM ceiling on random data (bf16, fp32, tf32)
#   attention  the fused attention's TFLOP/s, forward and backward (attention_fa2_v1: the first
#              generation of the FlashAttention-2 kernels, timed in the same run for the speed-up)
#   bench      GPT-2 124M bf16 training in ztrain: tokens/s, step time, peak memory, MFU
#   pytorch    the same model trained by PyTorch (bf16 autocast, SDPA flash, fused AdamW) at the
#              bench's micro-batch: ztrain's tokens/s as a ratio to it
#   zero3      ZeRO-3 against ZeRO-0 at world size 1 (the stage-3 machinery's own cost)
#   pytorch_compile  the PyTorch baseline under torch.compile, if it compiles in the time left
# After every stage, $OUT/gpu_check.json (all results so far) and $OUT/gpu_check.log (every
# stage's output) are rewritten, so a hang or a crash still returns everything before it.
#
#   tools/gpu_check.sh [--quick] [--dry-run | --emulated] [--stages a,b,...] [--reuse]
#     --quick    fewer timed steps
#     --dry-run  no GPU needed: every stage's plumbing (time limits, a stage that hangs, one that
#                crashes, the results file, the log, the PyTorch script on a tiny model on the CPU)
#                without building or running CUDA code; tested in CI
#     --emulated no GPU needed: the same programs built with the host compiler against the emulated
#                CUDA device (engine/backend/cuda_emu) and run at tiny sizes (ops, parity,
#                attention, bench with the planner comparison, zero3), so the script runs end to
#                end before a GPU does; the results say "device": "emulated" and are never copied
#                to bench/results (tested in CI)
#     --stages   only these stages (the build runs unless --reuse finds current binaries)
#     --reuse    skip the build when every binary is newer than every source it is built from,
#                so a second, partial run fits the lease
# Environment: OUT (default build/gpu_check/out, or build/gpu_check_emulated/out), PYTHON
# (default python3), GPU_CHECK_BUDGET_S (the deadline, default 400).
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS=20
DRY=0
EMU=0
ONLY=""
REUSE=0
usage() { echo "usage: tools/gpu_check.sh [--quick] [--dry-run | --emulated] [--stages a,b,...] [--reuse]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) STEPS=5 ;;
    --dry-run) DRY=1 ;;
    --emulated) EMU=1 ;;
    --reuse) REUSE=1 ;;
    --stages) [ $# -ge 2 ] || usage; ONLY=",$2,"; shift ;;
    --stages=*) ONLY=",${1#--stages=},"; ;;
    *) usage ;;
  esac
  shift
done
[ $DRY = 1 ] && [ $EMU = 1 ] && usage
PYTHON=${PYTHON:-python3}
B=build/gpu_check
[ $EMU = 1 ] && B=build/gpu_check_emulated
OUT=${OUT:-$B/out}
mkdir -p "$B" "$OUT" bench/results
RESULTS=$OUT/gpu_check.json
LOG=$OUT/gpu_check.log
: > "$LOG"
START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-$([ $EMU = 1 ] && echo 1500 || echo 400)}
log() { echo "gpu_check: $*" | tee -a "$LOG" >&2; }

if [ $DRY = 1 ]; then
  gpu="dry run (no GPU)"
  arch=90
elif [ $EMU = 1 ]; then
  gpu="NVIDIA H200 (emulated)"
  arch=90
  STEPS=2
  export GPU_CHECK_TINY=1
else
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
  [ -n "$arch" ] || arch=90
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null | head -1)
fi
$PYTHON tools/gpu_check/results.py init "$RESULTS" --gpu "${gpu:-unknown}" --sm "$arch" --dry-run "$DRY" \
  --nvcc "$(nvcc --version 2>/dev/null | tail -1)" --device "$([ $EMU = 1 ] && echo emulated || echo gpu)" \
  || { echo "gpu_check: $PYTHON cannot run tools/gpu_check/results.py" >&2; exit 1; }
log "GPU: ${gpu:-unknown} (sm_$arch); deadline ${BUDGET} s"

# stage NAME LIMIT_S COMMAND...: runs COMMAND under min(LIMIT_S, time left before the deadline);
# its stdout's JSON lines, exit status, time and stderr tail go into the results at once.
stage() {
  local name=$1 limit=$2; shift 2
  if [ -n "$ONLY" ] && [ "$name" != build ] && [[ "$ONLY" != *",$name,"* ]]; then return; fi
  local left=$(( BUDGET - ($(date +%s) - START) ))
  if [ "$left" -lt 5 ]; then
    log "$name: skipped (deadline reached)"
    $PYTHON tools/gpu_check/results.py skip "$RESULTS" "$name" "deadline reached"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  log "$name: running (limit ${limit} s)"
  local t0=$(date +%s%N)
  # bash -c: a stage may be one of the functions below (exported), and timeout runs programs only
  timeout -k 5 "$limit" bash -c '"$@"' stage "$@" > "$B/$name.out" 2> "$B/$name.err"
  local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  { echo "=== $name: exit $rc after $ms ms (limit $limit s): $*"; cat "$B/$name.out"; echo "--- stderr"; cat "$B/$name.err"; } >> "$LOG"
  $PYTHON tools/gpu_check/results.py stage "$RESULTS" "$name" "$rc" "$ms" "$limit" "$B/$name.out" "$B/$name.err"
  log "$name: exit $rc in $(( ms / 1000 )) s"
}

# ---- build ----
# The host code as CMake builds it for CI (GNU C++20, so multiply-adds contract; the x86-64-v3
# floor; the CPU backend's -fno-math-errno -fno-trapping-math, which let its exp loops vectorize):
# the CPU reference the ops are compared with is then the one the tolerances were set against.
# Built as ISO C++ without them, its fp32 sum of exponentials over a 50k vocabulary runs scalar
# and differs from a tree reduction by 5e-5 (the tolerance is 2e-5): found on the emulated device.
HOST_FLAGS="-std=gnu++20 -O2 -fopenmp -fno-math-errno -fno-trapping-math -DZTRAIN_NO_BLAS"
[ "$(uname -m)" = x86_64 ] && HOST_FLAGS="$HOST_FLAGS -march=x86-64-v3"
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")}
# The sources every binary is built from (for --reuse)
sources() {
  awk '$1 == "base" || $1 == "cpu" || $1 == "model" || $1 == "cuda" { print $2 }' sources.list
  echo tools/gpu_check/backend_select.cpp tools/gpu_check/gemm_probe.cu tests/cuda/test_backend_ops.cpp \
       tools/gpu_check/gpt2_cuda_check.cpp
  find engine models tools/gpu_check -name '*.h' -o -name '*.cuh'
  [ "${EMU:-0}" = 1 ] && find engine/backend/cuda_emu -type f
}
current() {  # every binary exists and is newer than every source
  local bins=("$B/test_backend_ops" "$B/gpt2_cuda_check")
  [ "${EMU:-0}" = 1 ] || bins+=("$B/gemm_probe")
  for b in "${bins[@]}"; do
    [ -x "$b" ] || return 1
    [ -z "$(find $(sources) -newer "$b" 2>/dev/null | head -1)" ] || return 1
  done
}
build() {
  if [ "${REUSE:-0}" = 1 ] && current; then
    echo '{"check": "build", "ok": true, "reused": true}'
    return 0
  fi
  rm -f "$B/test_backend_ops" "$B/gpt2_cuda_check" "$B/gemm_probe"  # a failed build leaves none behind
  [ "${EMU:-0}" = 1 ] && { build_emulated; return; }
  local CXXFLAGS=($HOST_FLAGS -I. -Itools/gpu_check/shim -I"$CUDA_HOME/include")
  local NVFLAGS=(-std=c++17 -O3 -gencode=arch=compute_$arch,code=sm_$arch -I. -Itools/gpu_check/shim)
  local objs=() pids=() failed=0
  # The libraries that need only the CUDA toolkit, from the list CMake builds (sources.list), plus
  # the run-time backend choice without spdlog.
  for f in $(awk '$1 == "base" || $1 == "cpu" || $1 == "model" || $1 == "cuda" { print $2 }' sources.list) \
           tools/gpu_check/backend_select.cpp; do
    local o="$B/$(echo "$f" | tr / _).o"
    case "$f" in
      *.cu) nvcc "${NVFLAGS[@]}" -c "$f" -o "$o" & pids+=($!) ;;
      *) g++ "${CXXFLAGS[@]}" -c "$f" -o "$o" & pids+=($!) ;;
    esac
    objs+=("$o")
  done
  nvcc "${NVFLAGS[@]}" tools/gpu_check/gemm_probe.cu -lcublasLt -o "$B/gemm_probe" & pids+=($!)
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  # rpath: the toolkit's libraries are found at run time without LD_LIBRARY_PATH
  local LIBS=(-L"$CUDA_HOME/lib64" -L"$CUDA_HOME/lib" -Wl,-rpath,"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib"
              -lcudart -lcublasLt -fopenmp -ldl)
  g++ "${CXXFLAGS[@]}" tests/cuda/test_backend_ops.cpp "${objs[@]}" "${LIBS[@]}" -o "$B/test_backend_ops" & p1=$!
  g++ "${CXXFLAGS[@]}" tools/gpu_check/gpt2_cuda_check.cpp "${objs[@]}" "${LIBS[@]}" -o "$B/gpt2_cuda_check" & p2=$!
  wait $p1 || failed=1
  wait $p2 || failed=1
  echo "{\"check\": \"build\", \"ok\": $([ $failed = 0 ] && echo true || echo false)}"
  return $failed
}
# The same programs with the host compiler against the emulated device: the .cu files as C++ with
# the emulated toolkit headers first, the emulator's runtime as a shared library of its own (its
# thread-locals must stay apart from the kernels' shared memory, which is poisoned per block).
build_emulated() {
  local EMU_INC=engine/backend/cuda_emu/include
  local CXXFLAGS=($HOST_FLAGS -fPIC -I$EMU_INC -I. -Itools/gpu_check/shim)
  local KFLAGS=(-x c++ -DZT_EMU_KERNEL_MODULE=1 -fno-extern-tls-init -Wno-unused-variable -Wno-unknown-pragmas)
  local objs=() pids=() failed=0
  g++ "${CXXFLAGS[@]}" -shared engine/backend/cuda_emu/runtime.cpp engine/backend/cuda_emu/simt.cpp \
      engine/backend/cuda_emu/cublaslt.cpp -lboost_context -lpthread -ldl -o "$B/libztrain_cuda_emu_runtime.so" & pids+=($!)
  for f in $(awk '$1 == "base" || $1 == "cpu" || $1 == "model" || $1 == "cuda" { print $2 }' sources.list) \
           tools/gpu_check/backend_select.cpp; do
    local o="$B/$(echo "$f" | tr / _).o"
    case "$f" in
      *.cu) g++ "${CXXFLAGS[@]}" "${KFLAGS[@]}" -c "$f" -o "$o" & pids+=($!) ;;
      *) g++ "${CXXFLAGS[@]}" -c "$f" -o "$o" & pids+=($!) ;;
    esac
    objs+=("$o")
    while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do sleep 0.2; done
  done
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  local LIBS=(-L"$B" -Wl,-rpath,"$PWD/$B" -lztrain_cuda_emu_runtime -fopenmp -lpthread -ldl)
  g++ "${CXXFLAGS[@]}" tests/cuda/test_backend_ops.cpp "${objs[@]}" "${LIBS[@]}" -o "$B/test_backend_ops" & p1=$!
  g++ "${CXXFLAGS[@]}" tools/gpu_check/gpt2_cuda_check.cpp "${objs[@]}" "${LIBS[@]}" -o "$B/gpt2_cuda_check" & p2=$!
  wait $p1 || failed=1
  wait $p2 || failed=1
  echo "{\"check\": \"build\", \"emulated\": true, \"ok\": $([ $failed = 0 ] && echo true || echo false)}"
  return $failed
}
dry_build() {  # what the build would compile must exist; nothing is compiled
  local missing=0
  for f in $(awk '$1 == "base" || $1 == "cpu" || $1 == "model" || $1 == "cuda" { print $2 }' sources.list) \
           tools/gpu_check/backend_select.cpp tools/gpu_check/gemm_probe.cu tests/cuda/test_backend_ops.cpp \
           tools/gpu_check/gpt2_cuda_check.cpp; do
    [ -f "$f" ] || { echo "missing: $f" >&2; missing=1; }
  done
  echo "{\"check\": \"build\", \"dry_run\": true, \"ok\": $([ $missing = 0 ] && echo true || echo false)}"
  return $missing
}
dry() { echo "{\"check\": \"$1\", \"dry_run\": true}"; }  # a stand-in for a GPU program
export -f build build_emulated dry_build dry sources current
export B arch CUDA_HOME EMU REUSE
export HOST_FLAGS

# the build passed: no stage runs on binaries of an earlier build
built() {
  grep -q '"ok": true' "$B/build.out" 2>/dev/null && return 0
  log "build failed: no stage runs (see $LOG)"
  return 1
}
# the summary, the copy of the results, and exit with $1
finish() {
  $PYTHON tools/gpu_check/results.py summary "$RESULTS" | tee -a "$LOG"
  local stamp
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
  [ $DRY = 1 ] || [ $EMU = 1 ] || cp "$RESULTS" "bench/results/gpu_check-$stamp.json"
  log "results in $RESULTS (total $(( $(date +%s) - START )) s)"
  exit "$1"
}

if [ $DRY = 1 ]; then
  stage build 200 dry_build
  stage ops 45 dry ops
  stage ops_wmma 30 dry ops_wmma
  stage parity 45 dry parity
  stage gemm 30 dry gemm
  stage attention 30 dry attention
  stage attention_fa2_v1 30 dry attention_fa2_v1
  stage attention_wmma 30 dry attention_wmma
  stage bench 60 dry bench_gpt2_124m
  stage pytorch 60 $PYTHON tools/gpu_check/torch_gpt2.py --tiny --device cpu --steps 2 --batch 2
  stage zero3 45 dry zero3_overhead
  stage bench_unfused 45 dry bench_unfused
  # the failure paths: a stage that hangs past its limit, and one that dies of a signal
  stage hang_probe 2 sleep 30
  stage crash_probe 10 bash -c 'echo "{\"check\": \"crash_probe\", \"partial\": true}"; kill -SEGV $$'
elif [ $EMU = 1 ]; then
  stage build 400 build
  built || finish 1
  # bf16, the bench's type: every op in all three types runs in CI's race check already
  stage ops 300 env ZTRAIN_OPS_DTYPES=bf16 "$B/test_backend_ops"
  stage ops_wmma 120 env ZTRAIN_ATTENTION=wmma ZTRAIN_OPS_SECTIONS=attention ZTRAIN_OPS_DTYPES=bf16 "$B/test_backend_ops"
  stage parity 300 "$B/gpt2_cuda_check" parity
  stage attention 60 "$B/gpt2_cuda_check" attention
  stage attention_fa2_v1 60 env ZTRAIN_ATTENTION=fa2-v1 "$B/gpt2_cuda_check" attention
  stage bench 120 "$B/gpt2_cuda_check" bench "$STEPS"
  stage zero3 120 "$B/gpt2_cuda_check" zero3 "$STEPS"
  stage bench_unfused 120 env ZTRAIN_GEMM_EPILOGUES=off "$B/gpt2_cuda_check" bench "$STEPS"
else
  stage build 200 build
  built || finish 1
  export CUDA_LAUNCH_BLOCKING=1  # ops first, each launch synchronous: an error names its kernel
  stage ops 45 "$B/test_backend_ops"
  # the WMMA attention kernels the FlashAttention-2 ones replaced as the default, against the CPU too
  stage ops_wmma 30 env ZTRAIN_ATTENTION=wmma "$B/test_backend_ops"
  unset CUDA_LAUNCH_BLOCKING
  stage parity 45 "$B/gpt2_cuda_check" parity
  stage gemm 30 "$B/gemm_probe"
  stage attention 30 "$B/gpt2_cuda_check" attention
  stage attention_fa2_v1 30 env ZTRAIN_ATTENTION=fa2-v1 "$B/gpt2_cuda_check" attention
  stage attention_wmma 30 env ZTRAIN_ATTENTION=wmma "$B/gpt2_cuda_check" attention
  stage bench 60 "$B/gpt2_cuda_check" bench "$STEPS"
  MB=$($PYTHON tools/gpu_check/results.py get "$RESULTS" bench micro_batch 16)
  stage pytorch 60 $PYTHON tools/gpu_check/torch_gpt2.py --batch "$MB" --steps "$STEPS"
  stage zero3 45 "$B/gpt2_cuda_check" zero3 "$((STEPS / 3 + 1))"
  # the same training without cuBLASLt's fused epilogues (bias, GELU, DGELU, BGRADB): what they gain
  stage bench_unfused 45 env ZTRAIN_GEMM_EPILOGUES=off "$B/gpt2_cuda_check" bench "$((STEPS / 2 + 1))"
  # the head and loss in one chunk of every row (the logits tensor whole), and cuBLASLt's first
  # heuristic for every GEMM without timing: what the chunked head and the autotune gain
  stage bench_head_whole 45 env ZTRAIN_HEAD_CHUNK_ROWS=1000000000 "$B/gpt2_cuda_check" bench "$((STEPS / 2 + 1))"
  stage bench_first_heuristic 45 env ZTRAIN_GEMM_AUTOTUNE=off "$B/gpt2_cuda_check" bench "$((STEPS / 2 + 1))"
  stage pytorch_compile 120 $PYTHON tools/gpu_check/torch_gpt2.py --batch "$MB" --steps "$STEPS" --compile
fi

finish 0
