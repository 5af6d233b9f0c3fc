#!/usr/bin/env bash
# Runs the whole test suite: installs missing dependencies, builds, runs ctest.
# Tests that need ../shared/data (the real tokenizer ranks) skip with a message when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
cd build && ctest --output-on-failure --timeout 1500 "$@"
