#!/usr/bin/env bash
# Installs what ztrain needs to build and test, from Debian/Ubuntu packages and npm; does nothing
# for what is already there. Used by tools/demo.sh, tools/test.sh and CI.
set -euo pipefail
cd "$(dirname "$0")/.."

# Build: compiler, CMake, toml++ (run spec), spdlog (logging), nlohmann-json (manifests), HDF5
# (state dumps, checkpoints), Open MPI (launch), OpenBLAS (CPU GEMM), PCRE2 (tokenizer regex),
# zlib (CRC-32). Tests: Catch2, Debian's PyTorch + h5py (parity reference), Node.js + npm
# (tiktoken reference), Jinja2 (the chat templates as Hugging Face renders them), protobuf's
# compiler and Python runtime (the TensorBoard event files' independent reader), PyYAML (the
# Kubernetes manifests' checks), gnuplot (ztrain report draws its PNG with it), shellcheck (the
# shipped scripts), iproute2 + util-linux (the multi-host tests' network namespaces: ip, tc, unshare).
PKGS=(build-essential cmake pkg-config git libtomlplusplus-dev libspdlog-dev nlohmann-json3-dev
      libhdf5-dev libopenmpi-dev openmpi-bin libopenblas-dev libopenblas-openmp-dev libpcre2-dev zlib1g-dev libcurl4-openssl-dev libssl-dev
      liburing-dev libboost-context-dev catch2 python3 python3-torch python3-h5py python3-numpy python3-jinja2 python3-protobuf protobuf-compiler python3-yaml curl gnuplot-nox shellcheck
      iproute2 util-linux)
if [ "${ZTRAIN_SKIP_TEST_DEPS:-0}" = 1 ]; then
  PKGS=(build-essential cmake pkg-config libtomlplusplus-dev libspdlog-dev nlohmann-json3-dev
        libhdf5-dev libopenmpi-dev openmpi-bin libopenblas-dev libopenblas-openmp-dev libpcre2-dev zlib1g-dev libcurl4-openssl-dev libssl-dev
        liburing-dev libboost-context-dev catch2)
fi
if [ "${ZTRAIN_SKIP_TEST_DEPS:-0}" != 1 ]; then  # Node.js runs the tests' npm references
  command -v node >/dev/null 2>&1 || PKGS+=(nodejs)
  command -v npm >/dev/null 2>&1 || PKGS+=(npm)
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The fuzzers need clang with its libFuzzer runtime (Debian 12: libclang-rt-14-dev). Optional:
# tools/fuzz.sh skips without clang, so a distribution with other package names still builds.
if [ "${ZTRAIN_SKIP_TEST_DEPS:-0}" != 1 ] && ! dpkg -s libclang-rt-14-dev >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev \
    >/dev/null 2>&1 || echo "install_deps: clang/libFuzzer not installed; the fuzz test will skip"
fi

# npm packages the tests use, pinned by their package-lock.json: OpenAI's tiktoken (the tokenizer
# reference) and s3rver (the S3-compatible server the data streaming tests start themselves).
if [ "${ZTRAIN_SKIP_TEST_DEPS:-0}" != 1 ]; then
  [ -d tests/tokenizer/node_modules/tiktoken ] || (cd tests/tokenizer && npm ci --no-audit --no-fund --loglevel=error)
  [ -d tests/data/node_modules/s3rver ] || (cd tests/data && npm ci --no-audit --no-fund --loglevel=error)
fi
