#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) for the shard header, manifest, run spec and
# safetensors parsers, and runs each for RUNS inputs (default 100000) from the seed corpus in tests/fuzz/corpus
# (written by tests/fuzz/make_seeds.py: a valid input setting every field plus one per rejection rule),
# with a fixed seed: the same inputs every time, so CI cannot pass or fail by chance. For open-ended
# fuzzing: FUZZ_SEED=0 (random) and a large RUNS.
# A crash, sanitizer report or trap, a non-zero exit of the fuzzer, or fewer inputs executed than
# asked fails the script; a failing input is left in build/fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-100000}
SEED=${FUZZ_SEED:-1}
CXX=${FUZZ_CXX:-clang++}
out=build/fuzz
mkdir -p "$out"
probe() { echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' > "$out/probe.cpp" &&
  "$CXX" -fsanitize=fuzzer "$out/probe.cpp" -o "$out/probe" >/dev/null 2>&1; }
if ! command -v "$CXX" >/dev/null || ! probe; then
  echo "fuzz.sh: SKIP: $CXX with libFuzzer not available (Debian 12: clang libclang-rt-14-dev)"
  exit 77  # ctest's skip code
fi
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I.)
common=(engine/core/status.cpp engine/core/redact.cpp engine/core/atomic_file.cpp engine/core/user_path.cpp)
libs=(-lfmt)
build() {  # name sources... -- libs...
  local name=$1; shift
  "$CXX" "${flags[@]}" "$@" -o "$out/$name"
}
build fuzz_shard_header tests/fuzz/fuzz_shard_header.cpp data/shard.cpp "${common[@]}" -lz "${libs[@]}"
build fuzz_manifest tests/fuzz/fuzz_manifest.cpp data/manifest.cpp data/shard.cpp "${common[@]}" -lz "${libs[@]}"
build fuzz_safetensors tests/fuzz/fuzz_safetensors.cpp engine/hf/safetensors.cpp "${common[@]}" "${libs[@]}"
# toml++ 3.3 asserts an internal precondition (parse_key) just before it reports some syntax errors
# (input: a table header "[" followed by a carriage return); release builds report the error
# cleanly (exit 2; tests/unit/config/test_spec.cpp keeps that input). Fuzz the code as shipped:
# toml++'s own debug assertions off, ours and the sanitizers on.
# The spec asks the model families (models/registry.cpp) for their defaults and checks; they come
# with the models they build: the base and model libraries of sources.list, fuzzed as shipped, and
# the CPU backend (their host backend), linked uninstrumented from the build.
mapfile -t models < <(awk '$1 == "base" || $1 == "model" { print $2 }' sources.list)
if [ ! -f build/libztrain_cpu.a ]; then echo "fuzz.sh: build/libztrain_cpu.a missing: cmake --build build first"; exit 1; fi
build fuzz_run_spec -D'TOML_ASSERT(expr)=static_assert(true)' tests/fuzz/fuzz_run_spec.cpp \
  engine/config/spec.cpp engine/config/spec_dump.cpp engine/config/spec_mixture.cpp engine/config/spec_schema.cpp \
  engine/hf/hf_config.cpp engine/hf/spec_loading.cpp engine/core/byte_size.cpp \
  engine/core/status.cpp engine/core/redact.cpp engine/core/atomic_file.cpp \
  $(printf '%s\n' "${models[@]}" | grep -v -x -e engine/core/status.cpp -e engine/core/redact.cpp \
    -e engine/core/atomic_file.cpp -e engine/core/byte_size.cpp) \
  build/libztrain_cpu.a -ltomlplusplus "${libs[@]}" -lopenblas -fopenmp -ldl -pthread
for t in shard_header manifest run_spec safetensors; do
  corpus="$out/corpus_$t"
  echo "fuzz.sh: fuzz_$t, $RUNS inputs, seed $SEED"
  # a fresh copy of the seed corpus each time: what earlier runs added must not change this run;
  # artifacts of earlier runs go too, so that what is found below is this run's
  rm -rf "$corpus" && mkdir -p "$corpus" && cp tests/fuzz/corpus/$t/* "$corpus/"
  (cd "$out" && rm -f crash-* leak-* oom-* timeout-* slow-unit-*)
  status=0
  (cd "$out" && ./fuzz_$t -runs="$RUNS" -seed="$SEED" -max_len=4096 -print_final_stats=1 \
      "corpus_$t" > "fuzz_$t.log" 2>&1) || status=$?
  # INITED's cov: the edges the seed corpus alone reaches (tests/fuzz/make_seeds.py writes it)
  grep -E "INITED|stat::number_of_executed_units|ERROR|SUMMARY|Done" "$out/fuzz_$t.log" || true
  found=$(cd "$out" && find . -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'oom-*' -o -name 'timeout-*' \) | head -1)
  if [ -n "$found" ]; then echo "fuzz.sh: fuzz_$t found a failing input: $out/$found"; exit 1; fi
  if [ "$status" != 0 ]; then
    echo "fuzz.sh: fuzz_$t exited with status $status (log: $out/fuzz_$t.log)"; tail -20 "$out/fuzz_$t.log"; exit 1
  fi
  # A fuzzer that did not start or stopped early must not pass: it ran every input it was given.
  ran=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$out/fuzz_$t.log" | tail -1)
  if [ -z "$ran" ] || [ "$ran" -lt "$RUNS" ]; then
    echo "fuzz.sh: fuzz_$t executed ${ran:-no} inputs, expected at least $RUNS (log: $out/fuzz_$t.log)"; exit 1
  fi
done
echo "fuzz.sh: no failures"
