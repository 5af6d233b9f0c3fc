#!/usr/bin/env bash
# The GPU check, for a lent GPU machine (the NVIDIA driver, the CUDA toolkit and Python with
# PyTorch, but none of ztrain's other dependencies and no network) and its limits: a lease of 15
# minutes of device time holds the machine's start (minutes), this run and a second try, so the
# whole run, build included, has a deadline of 300 s (GPU_CHECK_BUDGET_S).
#
# It builds, with nvcc and the host compiler only, the CUDA backend, the CPU reference backend
# (without BLAS) and the check programs, or takes them built beforehand on another machine
# (--build-only there, build/gpu_check carried here, --reuse: the binaries are used only where the
# hash of the sources they were built from equals this tree's). Then it runs the stages in order of
# value, each under its own time limit, all under the deadline (--dry-run prints the plan):
#   ops        every op on CUDA vs the CPU backend, fp32/bf16/fp16, CUDA_LAUNCH_BLOCKING=1 (the
#              first failing op is named; tests/cuda/test_backend_ops.cpp); ztrain's attention kernels
#   ops_cudnn  the attention ops with cuDNN's fused attention wherever it runs (ZTRAIN_ATTENTION=
#              cudnn), forward and backward against the CPU backend: before its choice is trusted;
#              fails when cuDNN did not run (cudnn_ran)
#   parity     GPT-2, Llama, Qwen2, Qwen3 and Mistral forward, gradients and 5 AdamW steps, CUDA vs
#              CPU, at odd sizes, 3 precisions
#   bench      GPT-2 124M bf16 training in ztrain: tokens/s, step time, peak memory, MFU, and the
#              step's phases (forward, backward, optimizer) by CUDA events; its log gives every
#              GEMM's autotune choice and each fused epilogue against the unfused kernels
#   pytorch    the same model trained by PyTorch (bf16 autocast, SDPA flash, fused AdamW) at the
#              bench's micro-batch: ztrain's tokens/s as a ratio to it
#   attention  the fused attention's TFLOP/s, forward and backward (CUDA events, 20 calls), T 1024
#              and 4096, head size 64 and 128; each bf16 shape's inputs and results dumped
#   attention_cudnn  the same with cuDNN's fused attention (ZTRAIN_ATTENTION=cudnn) and with
#              ztrain's kernels (=fa2), so the choice's two sides are both on record
#   sdpa       PyTorch's scaled_dot_product_attention (flash, cuDNN, memory-efficient) on the same
#              shapes: the speed reference; and the dumped results against an fp32 reference,
#              beside PyTorch's own error (tools/gpu_check/torch_attention.py)
#   gemm       the cuBLASLt GEMM ceiling on random data (bf16, fp32, tf32), bf16 at GPT-2 124M's
#              own shapes against it, and the device memory's copy bandwidth
#   fp8        the FP8 linear layers against bf16 at GPT-2 124M's and Llama 3 8B's shapes (8192
#              tokens): forward and backward times, and the FP8 output's error against bf16's
#              (failing above 1e-2: a wrong scale); its limit a guess until measured
#   nccl       ztrain's NCCL communicator on one rank and the machine's NCCL (the toolkit's, or
#              PyTorch's nvidia-nccl wheel): two communicators, every collective's result, the
#              launch order across them, a small and a large all-reduce's time
#              (tools/gpu_check/nccl_smoke.cpp; no MPI there: tools/gpu_check/mpi_one_rank)
#   sanitizer_memcheck  compute-sanitizer's memcheck over the attention ops (when present)
#   bench_deterministic the bench under [run] deterministic: what bit-reproducibility costs
#   pytorch_compile  the PyTorch baseline under torch.compile (the ratio's best baseline)
#   torch_llama  two of Llama 3.1 8B's layers as a PyTorch engine (torchtitan) runs them, seq 8192,
#              eager and compiled: what PyTorch engines get from the GPU, to price their published
#              runs with (bench/published_runs.py; tools/gpu_check/torch_llama_layer.py)
#   sanitizer_racecheck  compute-sanitizer's shared-memory race check over the attention ops
#   zero3      ZeRO-3 against ZeRO-0 at world size 1 (the stage-3 machinery's own cost)
#   bench_head_whole  the bench with the head and loss in one chunk: what the chunked head gains
#   bench_text the bench and the deterministic bench on Zipf-distributed ids, as text has them
#   ops_wmma, attention_wmma  the WMMA attention kernels (the fallback) against the CPU, and timed
#              (the default's speed-up over them per shape)
# At the end, $OUT/calibration.json: the measured efficiencies for the planner's time model.
# After every stage, $OUT/gpu_check.json (all results so far) and $OUT/gpu_check.log (every
# stage's output) are rewritten, so a hang or a crash still returns everything before it.
#
#   tools/gpu_check.sh [--quick] [--dry-run | --emulated | --build-only] [--stages a,b,...] [--reuse]
#     --quick      fewer timed steps
#     --dry-run    no GPU needed: the plan, and every stage's plumbing (time limits, a stage that
#                  hangs, one that crashes, the results file, the log, the PyTorch script on a tiny
#                  model on the CPU) without building or running CUDA code; tested in CI
#     --emulated   no GPU needed: the same programs built with the host compiler against the
#                  emulated CUDA device (engine/backend/cuda_emu) and run at tiny sizes, so the
#                  script runs end to end before a GPU does; the results say "device": "emulated"
#                  and are never copied to bench/results (tested in CI)
#     --build-only build the GPU binaries for sm_90 (or the visible GPU's) into build/gpu_check with
#                  the hash of their sources, and say their size: what to carry to the GPU machine
#     --stages     only these stages (the build runs unless --reuse finds current binaries)
#     --reuse      skip the build when the binaries were built from these very sources (their
#                  hash, so a copied tree qualifies), so a carried build or a second run fits
# Environment: OUT (default build/gpu_check/out, or build/gpu_check_emulated/out), PYTHON
# (default python3), GPU_CHECK_BUDGET_S (the deadline, default 300; 1500 emulated).
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS=20
DRY=0
EMU=0
ONLY=""
REUSE=0
BUILD_ONLY=0
usage() { echo "usage: tools/gpu_check.sh [--quick] [--dry-run | --emulated | --build-only] [--stages a,b,...] [--reuse]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) STEPS=5 ;;
    --dry-run) DRY=1 ;;
    --emulated) EMU=1 ;;
    --reuse) REUSE=1 ;;
    --build-only) BUILD_ONLY=1 ;;
    --stages) [ $# -ge 2 ] || usage; ONLY=",$2,"; shift ;;
    --stages=*) ONLY=",${1#--stages=},"; ;;
    *) usage ;;
  esac
  shift
done
[ $(( DRY + EMU + BUILD_ONLY )) -gt 1 ] && usage
PYTHON=${PYTHON:-python3}
B=build/gpu_check
# the NCCL smoke test's own sources (the base library's objects link with them)
NCCL_SMOKE_SOURCES="tools/gpu_check/nccl_smoke.cpp engine/comm/comm_nccl.cpp engine/comm/nccl_launch_order.cpp"
export NCCL_SMOKE_SOURCES
[ $EMU = 1 ] && B=build/gpu_check_emulated
OUT=${OUT:-$B/out}
mkdir -p "$B" "$OUT" bench/results
RESULTS=$OUT/gpu_check.json
LOG=$OUT/gpu_check.log
: > "$LOG"
START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-$([ $EMU = 1 ] && echo 1500 || echo 300)}
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
  # cuDNN (attention) and NCCL from PyTorch's wheels (nvidia-cudnn, nvidia-nccl) on the library
  # path of every stage, where the machine has them: ztrain loads libcudnn.so.9 with dlopen
  for pkg in cudnn nccl; do
    d=$($PYTHON -c "import nvidia.$pkg, os; print(os.path.join(list(nvidia.$pkg.__path__)[0], 'lib'))" 2>/dev/null)
    [ -n "$d" ] && [ -d "$d" ] && LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  done
  export LD_LIBRARY_PATH
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
  echo tools/gpu_check/backend_select.cpp engine/observe/throughput.cpp tools/gpu_check/gemm_probe.cu tests/cuda/test_backend_ops.cpp \
       tools/gpu_check/gpt2_cuda_check.cpp $NCCL_SMOKE_SOURCES
  find engine models tools/gpu_check -name '*.h' -o -name '*.cuh'
  [ "${EMU:-0}" = 1 ] && find engine/backend/cuda_emu -type f
}
# The hash of everything the binaries are built from (sources, flags, architecture): written beside
# them by a build, compared by --reuse (file times do not survive a copy to another machine).
sources_list() {  # each source's hash, then the flags: what sources_hash hashes
  sources | LC_ALL=C sort -u | xargs sha256sum  # one order in every locale
  echo "$HOST_FLAGS sm_$arch emulated=${EMU:-0}"
}
sources_hash() { sources_list | sha256sum | cut -c1-64; }
current() {  # every binary exists, built from these very sources; if not, says why on stderr
  local bins=("$B/test_backend_ops" "$B/gpt2_cuda_check")
  [ "${EMU:-0}" = 1 ] || bins+=("$B/gemm_probe")
  for b in "${bins[@]}"; do
    [ -f "$b" ] || { echo "not reused: $b is missing" >&2; return 1; }
    [ -x "$b" ] || chmod +x "$b" 2>/dev/null || { echo "not reused: $b is not executable" >&2; return 1; }
  done
  [ -f "$B/SOURCES.sha256" ] || { echo "not reused: $B/SOURCES.sha256 is missing" >&2; return 1; }
  local want have
  want=$(cat "$B/SOURCES.sha256")
  have=$(sources_hash)
  [ "$want" = "$have" ] && return 0
  echo "not reused: the binaries were built from sources $want, this tree's are $have (sm_$arch, $HOST_FLAGS)" >&2
  # the files that differ, against the list the build wrote beside the hash
  [ -f "$B/SOURCES.list" ] && sources_list | diff "$B/SOURCES.list" - | grep '^[<>]' | head -20 >&2
  return 1
}
build() {
  if [ "${REUSE:-0}" = 1 ] && current; then
    echo '{"check": "build", "ok": true, "reused": true}'
    return 0
  fi
  rm -f "$B/test_backend_ops" "$B/gpt2_cuda_check" "$B/gemm_probe" "$B/nccl_smoke" "$B/SOURCES.sha256" "$B/SOURCES.list"  # none left by a failure
  if [ "${EMU:-0}" = 1 ]; then
    build_emulated || return 1
    sources_hash > "$B/SOURCES.sha256"
    sources_list > "$B/SOURCES.list"
    return 0
  fi
  local CXXFLAGS=($HOST_FLAGS -I. -Itools/gpu_check/shim -I"$CUDA_HOME/include")
  # cuDNN's headers from PyTorch's nvidia-cudnn wheel where the toolkit has none (else the stub)
  local cudnn_inc
  cudnn_inc=$($PYTHON -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "include"))' 2>/dev/null)
  [ -f "$CUDA_HOME/include/cudnn_graph.h" ] || { [ -n "$cudnn_inc" ] && [ -f "$cudnn_inc/cudnn_graph.h" ] && CXXFLAGS+=(-I"$cudnn_inc"); }
  local NVFLAGS=(-std=c++17 -O3 -gencode=arch=compute_$arch,code=sm_$arch -I. -Itools/gpu_check/shim)
  local objs=() pids=() failed=0
  # The libraries that need only the CUDA toolkit, from the list CMake builds (sources.list), plus
  # the run-time backend choice without spdlog.
  for f in $(awk '$1 == "base" || $1 == "cpu" || $1 == "model" || $1 == "cuda" { print $2 }' sources.list) \
           tools/gpu_check/backend_select.cpp engine/observe/throughput.cpp; do
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
  # the NCCL smoke test, on the one-rank MPI, with the base and CPU libraries' objects only; optional: a
  # toolkit without NCCL leaves the nccl stage to say why
  local base_objs=()
  for f in $(awk '$1 == "base" || $1 == "cpu" { print $2 }' sources.list); do base_objs+=("$B/$(echo "$f" | tr / _).o"); done
  g++ "${CXXFLAGS[@]}" -Itools/gpu_check/mpi_one_rank $NCCL_SMOKE_SOURCES "${base_objs[@]}" "${LIBS[@]}" -lnccl \
      -o "$B/nccl_smoke" 2> "$B/nccl_smoke_build.err" & p3=$!
  wait $p1 || failed=1
  wait $p2 || failed=1
  wait $p3 || echo "nccl_smoke not built (the nccl stage says why): $(tail -3 "$B/nccl_smoke_build.err")" >&2
  [ $failed = 0 ] && sources_hash > "$B/SOURCES.sha256" && sources_list > "$B/SOURCES.list"
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
           tools/gpu_check/backend_select.cpp engine/observe/throughput.cpp; do
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
  # the NCCL smoke test on MPI and the emulated NCCL (run under mpirun -np 1), optional as above
  local base_objs=()
  for f in $(awk '$1 == "base" || $1 == "cpu" { print $2 }' sources.list); do base_objs+=("$B/$(echo "$f" | tr / _).o"); done
  g++ "${CXXFLAGS[@]}" $(mpicxx --showme:compile 2>/dev/null) $NCCL_SMOKE_SOURCES engine/backend/cuda_emu/nccl.cpp \
      "${base_objs[@]}" "${LIBS[@]}" $(mpicxx --showme:link 2>/dev/null) -o "$B/nccl_smoke" 2> "$B/nccl_smoke_build.err" & p3=$!
  wait $p1 || failed=1
  wait $p2 || failed=1
  wait $p3 || echo "nccl_smoke not built (the nccl stage says why): $(tail -3 "$B/nccl_smoke_build.err")" >&2
  echo "{\"check\": \"build\", \"emulated\": true, \"ok\": $([ $failed = 0 ] && echo true || echo false)}"
  return $failed
}
dry_build() {  # what the build would compile must exist; nothing is compiled
  local missing=0
  for f in $(awk '$1 == "base" || $1 == "cpu" || $1 == "model" || $1 == "cuda" { print $2 }' sources.list) \
           tools/gpu_check/backend_select.cpp engine/observe/throughput.cpp tools/gpu_check/gemm_probe.cu tests/cuda/test_backend_ops.cpp \
           tools/gpu_check/gpt2_cuda_check.cpp $NCCL_SMOKE_SOURCES; do
    [ -f "$f" ] || { echo "missing: $f" >&2; missing=1; }
  done
  echo "{\"check\": \"build\", \"dry_run\": true, \"ok\": $([ $missing = 0 ] && echo true || echo false)}"
  return $missing
}
dry() { echo "{\"check\": \"$1\", \"dry_run\": true}"; }  # a stand-in for a GPU program
# the attention timing, each bf16 shape's inputs and results dumped afresh into $DUMP (only when the
# stage runs: a skipped one leaves an earlier run's dump for --stages sdpa)
attention_dumped() {
  rm -rf "$DUMP" && mkdir -p "$DUMP" && GPU_CHECK_ATTENTION_DUMP="$DUMP" "$B/gpt2_cuda_check" attention
}
# text_benches STEPS [BATCH]: the bench, then the deterministic bench, on text-like (Zipf) ids
text_benches() {
  GPU_CHECK_TOKENS=text "$B/gpt2_cuda_check" bench "$1" && GPU_CHECK_TOKENS=text "$B/gpt2_cuda_check" bench-deterministic "$@"
}
# compute-sanitizer's TOOL (memcheck: out-of-bounds and misaligned accesses; racecheck: shared-memory
# hazards) over the attention ops in bf16, when the toolkit has it; its first reports to stderr
sanitize() {
  local tool=$1 cs log code errors
  cs=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
  [ -x "$cs" ] || { echo "{\"check\": \"sanitizer\", \"tool\": \"$tool\", \"skip\": \"compute-sanitizer not found\"}"; return 0; }
  log="$B/sanitizer_$tool.log"
  env ZTRAIN_ATTENTION=fa2 ZTRAIN_OPS_SECTIONS=attention ZTRAIN_OPS_DTYPES=bf16 "$cs" --tool "$tool" --error-exitcode 3 \
      "$B/test_backend_ops" > "$log" 2>&1
  code=$?
  # memcheck ends "ERROR SUMMARY: N errors", racecheck "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)"
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+|RACECHECK SUMMARY: .*\(([0-9]+) errors' "$log" | tail -1 | grep -oE '[0-9]+' | tail -1)
  echo "{\"check\": \"sanitizer\", \"tool\": \"$tool\", \"exit\": $code, \"errors\": ${errors:-null}, \"ops\": \"$(grep -E '^[0-9]+ passed' "$log" | tail -1)\"}"
  grep -m 8 -E '^========= (Invalid|Error|Race|Warning|  )' "$log" >&2
  return $code
}
# nccl_smoke, with the NCCL of the toolkit (its rpath) or, first when present, of PyTorch's
# nvidia-nccl wheel; under mpirun -np 1 on the emulated device (the emulated NCCL runs on MPI)
nccl_smoke() {
  [ -x "$B/nccl_smoke" ] || { echo "{\"check\": \"nccl_smoke\", \"error\": \"not built\"}"; cat "$B/nccl_smoke_build.err" >&2; return 1; }
  if [ "${EMU:-0}" = 1 ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 1 "$B/nccl_smoke"
    return
  fi
  local wheel
  wheel=$($PYTHON -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  LD_LIBRARY_PATH="${wheel:+$wheel:}${LD_LIBRARY_PATH:-}" "$B/nccl_smoke"
}
# cudnn_ran COMMAND...: COMMAND under ZTRAIN_ATTENTION=cudnn, failing when cuDNN did not run it: not
# loaded, a stub build, a plan that did not build, or a call it could not take (each said on
# stderr, which is passed on); a JSON line says which
cudnn_ran() {
  local err rc
  err=$(mktemp)
  "$@" 2> >(tee "$err" >&2)
  rc=$?
  wait
  local why
  why=$(grep -m1 -E "ZTRAIN_ATTENTION=cudnn, but cuDNN cannot|cuDNN's fused attention .* not built|cuDNN .* failed|needs .* bytes of scratch" "$err")
  grep -q "cuDNN [0-9.]* loaded" "$err" || why=${why:-cuDNN was not loaded}
  rm -f "$err"
  if [ -n "$why" ]; then
    echo "{\"check\": \"cudnn_ran\", \"ok\": false, \"why\": \"$(echo "$why" | tr -d '"\\' | cut -c1-200)\"}"
    return 1
  fi
  echo '{"check": "cudnn_ran", "ok": true}'
  return $rc
}
export -f build build_emulated dry_build dry sanitize attention_dumped text_benches sources sources_list sources_hash current nccl_smoke cudnn_ran
DUMP=$B/attention_dump  # the attention stage writes, the sdpa stage reads
export B arch CUDA_HOME EMU REUSE DUMP PYTHON
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
  if [ $DRY = 0 ] && [ $EMU = 0 ]; then
    cp "$RESULTS" "bench/results/gpu_check-$stamp.json"
    # the measured efficiencies for the planner's time model (docs/gpus.md, "Calibration")
    $PYTHON tools/gpu_check/results.py calibration "$RESULTS" "$OUT/calibration.json" && log "calibration in $OUT/calibration.json"
  fi
  log "results in $RESULTS (total $(( $(date +%s) - START )) s)"
  exit "$1"
}

# --build-only: the binaries to carry to a GPU machine (the objects removed: the device tool carries
# at most 64 MiB), with the hash --reuse checks there
if [ $BUILD_ONLY = 1 ]; then
  build > "$B/build.out" 2> "$B/build.err" || { cat "$B/build.err" >&2; log "build failed"; exit 1; }
  rm -f "$B"/*.o
  bytes=$(du -cb "$B/test_backend_ops" "$B/gpt2_cuda_check" "$B/gemm_probe" "$B/SOURCES.sha256" $(ls "$B/nccl_smoke" 2>/dev/null) | tail -1 | cut -f1)
  log "built for sm_$arch: $B/{test_backend_ops,gpt2_cuda_check,gemm_probe,nccl_smoke,SOURCES.sha256}, $(( bytes / 1048576 )) MiB; sources $(cat "$B/SOURCES.sha256")"
  [ "$bytes" -le $(( 60 * 1048576 )) ] || { log "more than 60 MiB: too large to carry"; exit 1; }
  log "on the GPU machine: carry $B, run tools/gpu_check.sh --reuse"
  exit 0
fi

# ---- the plan: the stages in order of value, each with its time limit. One deadline (BUDGET: 300 s
# by default, build included) cuts the tail, so a run cut short loses the least valuable stages.
# With binaries built beforehand (--build-only, carried to the GPU machine, then --reuse, which
# checks them against the sources' hash) the build stage takes no time. bench_unfused and
# bench_first_heuristic are gone: the bench's own log gives every GEMM's autotune choice and each
# fused epilogue against its unfused kernels, measured on the real shapes.
# The limits: about 3x each stage's time on the H200 (bench/results/gpu_check-h200-20261204T181200Z.json,
# binaries carried: 140 s for all of them), at least 10 s.
PLAN="build:150 ops:20 ops_cudnn:15 parity:35 bench:20 pytorch:40 attention:10 attention_cudnn:20 sdpa:25 gemm:10 fp8:60"
PLAN="$PLAN nccl:10"
PLAN="$PLAN sanitizer_memcheck:15"
# zero3: 3.2 s measured, 20 since its FP8 pair (ZeRO-0 against ZeRO-3's FP8 gather) was added, unmeasured
PLAN="$PLAN bench_deterministic:15 pytorch_compile:75 torch_llama:90 sanitizer_racecheck:35 zero3:20"
PLAN="$PLAN bench_head_whole:15 bench_text:25 ops_wmma:10 attention_wmma:10"
[ $DRY = 1 ] && PLAN="$PLAN hang_probe:2 crash_probe:10"  # the failure paths: a hang, a crash
[ $EMU = 1 ] && PLAN="build:400 nccl:60 fp8:60 ops:300 ops_wmma:120 parity:300 attention:60 sdpa:60 attention_wmma:60 bench:120 bench_deterministic:120 bench_text:120 zero3:120"
if [ $DRY = 1 ]; then  # the plan: when each stage starts at the latest (every one before it at its limit)
  at=0
  carried=0
  printf 'gpu_check plan: deadline %s s, build included; stages past it are skipped, in this order\n' "$BUDGET"
  printf '  %-18s %7s %22s %22s\n' stage limit "starts by (built there)" "(carried build: 0 s)"
  for entry in $PLAN; do
    late() { [ "$1" -ge "$BUDGET" ] && echo "$2s past" || echo "$2s"; }
    printf '  %-18s %6ss %22s %22s\n' "${entry%%:*}" "${entry##*:}" "$(late "$at" "$at")" "$(late "$carried" "$carried")"
    at=$(( at + ${entry##*:} ))
    [ "${entry%%:*}" = build ] || carried=$(( carried + ${entry##*:} ))
  done
fi

# run NAME LIMIT: the stage's command in this mode
run() {
  local name=$1 limit=$2
  if [ $DRY = 1 ]; then
    case $name in
      build) stage build "$limit" dry_build ;;
      pytorch) stage pytorch "$limit" $PYTHON tools/gpu_check/torch_gpt2.py --tiny --device cpu --steps 2 --batch 2 ;;
      torch_llama) stage torch_llama "$limit" $PYTHON tools/gpu_check/torch_llama_layer.py --tiny --device cpu --reps 2 ;;
      hang_probe) stage hang_probe "$limit" sleep 30 ;;
      crash_probe) stage crash_probe "$limit" bash -c 'echo "{\"check\": \"crash_probe\", \"partial\": true}"; kill -SEGV $$' ;;
      *) stage "$name" "$limit" dry "$name" ;;
    esac
    return
  fi
  if [ $EMU = 1 ]; then
    case $name in
      build) stage build "$limit" build; built || finish 1 ;;
      # bf16, the bench's type: every op in all three types runs in CI's race check already
      ops) stage ops "$limit" env ZTRAIN_OPS_DTYPES=bf16 "$B/test_backend_ops" ;;
      ops_wmma) stage ops_wmma "$limit" env ZTRAIN_ATTENTION=wmma ZTRAIN_OPS_SECTIONS=attention ZTRAIN_OPS_DTYPES=bf16 "$B/test_backend_ops" ;;
      parity) stage parity "$limit" "$B/gpt2_cuda_check" parity ;;
      attention) stage attention "$limit" attention_dumped ;;
      # the kernels' results against the fp32 reference (PyTorch on the CPU: no fused attention to time)
      sdpa) stage sdpa "$limit" $PYTHON tools/gpu_check/torch_attention.py --device cpu --dump "$DUMP" ;;
      attention_wmma) stage attention_wmma "$limit" env ZTRAIN_ATTENTION=wmma "$B/gpt2_cuda_check" attention ;;
      bench) stage bench "$limit" "$B/gpt2_cuda_check" bench "$STEPS" ;;
      bench_deterministic) stage bench_deterministic "$limit" "$B/gpt2_cuda_check" bench-deterministic "$STEPS" ;;
      bench_text) stage bench_text "$limit" text_benches "$STEPS" ;;
      zero3) stage zero3 "$limit" "$B/gpt2_cuda_check" zero3 "$STEPS" ;;
      nccl) stage nccl "$limit" nccl_smoke ;;
      fp8) stage fp8 "$limit" "$B/gpt2_cuda_check" fp8 ;;
    esac
    return
  fi
  case $name in
    build) stage build "$limit" build; built || finish 1 ;;
    # each launch synchronous: an error names its kernel
    # ztrain's kernels (cuDNN's attention is ops_cudnn's)
    ops) stage ops "$limit" env CUDA_LAUNCH_BLOCKING=1 ZTRAIN_ATTENTION=fa2 "$B/test_backend_ops" ;;
    # the WMMA attention kernels the FlashAttention-2 ones replaced as the default, against the CPU too
    ops_wmma) stage ops_wmma "$limit" env CUDA_LAUNCH_BLOCKING=1 ZTRAIN_ATTENTION=wmma ZTRAIN_OPS_SECTIONS=attention "$B/test_backend_ops" ;;
    ops_cudnn) stage ops_cudnn "$limit" cudnn_ran env CUDA_LAUNCH_BLOCKING=1 ZTRAIN_ATTENTION=cudnn \
                 ZTRAIN_OPS_SECTIONS=attention "$B/test_backend_ops" ;;
    parity) stage parity "$limit" "$B/gpt2_cuda_check" parity ;;
    gemm) stage gemm "$limit" "$B/gemm_probe" ;;
    attention_cudnn) stage attention_cudnn "$limit" bash -c \
                       "cudnn_ran env ZTRAIN_ATTENTION=cudnn $B/gpt2_cuda_check attention && ZTRAIN_ATTENTION=fa2 $B/gpt2_cuda_check attention" ;;
    nccl) stage nccl "$limit" nccl_smoke ;;
    fp8) stage fp8 "$limit" "$B/gpt2_cuda_check" fp8 ;;
    # each bf16 shape's inputs and results dumped for the sdpa stage's comparison
    attention) stage attention "$limit" attention_dumped ;;
    # PyTorch's fused attention (flash, cuDNN, memory-efficient) on the same shapes: the speed
    # reference, and ztrain's results against an fp32 reference beside PyTorch's own error
    sdpa) stage sdpa "$limit" $PYTHON tools/gpu_check/torch_attention.py --dump "$DUMP" ;;
    sanitizer_memcheck) stage sanitizer_memcheck "$limit" sanitize memcheck ;;
    sanitizer_racecheck) stage sanitizer_racecheck "$limit" sanitize racecheck ;;
    bench_deterministic) stage bench_deterministic "$limit" "$B/gpt2_cuda_check" bench-deterministic "$((STEPS / 4 + 1))" \
                           "$($PYTHON tools/gpu_check/results.py get "$RESULTS" bench micro_batch 16)" ;;
    # both embedding backwards on text-like ids (Zipf: frequent rows collide), atomics then the sort
    bench_text) stage bench_text "$limit" text_benches "$((STEPS / 4 + 1))" \
                  "$($PYTHON tools/gpu_check/results.py get "$RESULTS" bench micro_batch 16)" ;;
    attention_wmma) stage attention_wmma "$limit" env ZTRAIN_ATTENTION=wmma "$B/gpt2_cuda_check" attention ;;
    bench) stage bench "$limit" "$B/gpt2_cuda_check" bench "$STEPS" ;;
    pytorch) stage pytorch "$limit" $PYTHON tools/gpu_check/torch_gpt2.py --steps "$STEPS" \
               --batch "$($PYTHON tools/gpu_check/results.py get "$RESULTS" bench micro_batch 16)" ;;
    zero3) stage zero3 "$limit" "$B/gpt2_cuda_check" zero3 "$((STEPS / 3 + 1))" ;;
    # the head and loss in one chunk of every row (the logits tensor whole): what the chunked head gains
    bench_head_whole) stage bench_head_whole "$limit" env ZTRAIN_HEAD_CHUNK_ROWS=1000000000 "$B/gpt2_cuda_check" bench "$((STEPS / 2 + 1))" ;;
    # Llama 3.1 8B's layers as PyTorch engines run them, eager and compiled
    torch_llama) stage torch_llama "$limit" $PYTHON tools/gpu_check/torch_llama_layer.py ;;
    pytorch_compile) stage pytorch_compile "$limit" $PYTHON tools/gpu_check/torch_gpt2.py --steps "$STEPS" --compile \
                       --batch "$($PYTHON tools/gpu_check/results.py get "$RESULTS" bench micro_batch 16)" ;;
  esac
}
for entry in $PLAN; do run "${entry%%:*}" "${entry##*:}"; done
finish 0
