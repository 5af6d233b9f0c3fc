#!/usr/bin/env bash
# The demo: from a fresh Debian/Ubuntu machine to a trained small model in a few minutes.
# Installs what is missing, builds, tokenizes the Shakespeare text shipped in data/demo (byte-level,
# no vocabulary needed), trains configs/tiny-cpu.toml on the CPU and prints a generated sample.
set -euo pipefail
cd "$(dirname "$0")/.."
ZTRAIN_SKIP_TEST_DEPS=1 tools/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"

data=runs/data/shakespeare-byte
if [ ! -f "$data/train/manifest.json" ] || [ ! -f "$data/val/manifest.json" ]; then
  mkdir -p "$data"
  # last ~10% of the text is held out for validation
  total=$(wc -l < data/demo/tinyshakespeare.txt)
  head -n $((total * 9 / 10)) data/demo/tinyshakespeare.txt > "$data/train.txt"
  tail -n +$((total * 9 / 10 + 1)) data/demo/tinyshakespeare.txt > "$data/val.txt"
  build/bin/ztrain-tokenize shards --vocab byte --out "$data/train" "$data/train.txt"
  build/bin/ztrain-tokenize shards --vocab byte --out "$data/val" "$data/val.txt"
fi
exec build/bin/ztrain train configs/tiny-cpu.toml "$@"
