#!/usr/bin/env bash
# Builds the Docker image's cpu target with podman and runs what it holds (Dockerfile stage
# cpu-test: every shipped config checks and the demo trains, as the image's user).
#
# These machines have no Docker engine and reach no image registry, so the base image is made
# here: debootstrap builds a minimal Debian bookworm from the apt mirror this machine is
# configured with, `podman import` turns it into localhost/ztrain-base:bookworm, and podman builds
# on it (--isolation chroot: no container runtime needed).
#
#   tools/docker_check.sh           quick (CI): the cpu image around the binaries already in
#                                   build/bin (built on this Debian bookworm machine)
#   tools/docker_check.sh --full    the cpu target as users build it: compiled inside the image
#                                   (about 10 more minutes on 2 cores)
# The cuda target is not built: its NVIDIA base images cannot be fetched here (no registry). Its
# CUDA sources compile in every CI build (nvcc, outside Docker).
set -euo pipefail
cd "$(dirname "$0")/.."
full=0
[ "${1:-}" = "--full" ] && full=1
say() { echo "docker_check: $*"; }

need=()
command -v podman >/dev/null || need+=(podman)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { say "needs ${need[*]} (Debian packages) and root"; exit 77; }
  say "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
[ "$(id -u)" = 0 ] || { say "debootstrap needs root"; exit 77; }

base=localhost/ztrain-base:bookworm
if ! podman image exists "$base"; then
  # the apt mirror this machine already uses (never a host written here)
  mirror=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | head -1)
  [ -n "$mirror" ] || mirror=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' | head -1)
  [ -n "$mirror" ] || { say "no apt mirror configured"; exit 1; }
  rootfs=$(mktemp -d)
  say "debootstrap --variant=minbase bookworm (the configured mirror)"
  t0=$(date +%s)
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" > build/docker-debootstrap.log 2>&1 \
    || { tail -5 build/docker-debootstrap.log; exit 1; }
  # debootstrap leaves that mirror's "bookworm main" in the base's sources.list: all the image needs
  tar -C "$rootfs" -c . | podman import - "$base" > /dev/null
  rm -rf "$rootfs"
  say "base image $base made in $(( $(date +%s) - t0 )) s"
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
git ls-files -z | xargs -0 cp --parents -t "$ctx"
args=(--isolation chroot --build-arg CPU_BASE="$base")
if [ $full = 1 ]; then
  target=cpu
else
  [ -x build/bin/ztrain ] || { say "quick mode packages build/bin: build first (cmake --build build)"; exit 1; }
  mkdir -p "$ctx/prebuilt/bin"
  cp build/bin/ztrain build/bin/ztrain-tokenize build/bin/ztrain-bench-comm build/bin/ztrain-bench-data "$ctx/prebuilt/bin/"
  target=cpu-prebuilt
fi
t0=$(date +%s)
say "podman build --target $target"
podman build "${args[@]}" --target "$target" -t "localhost/ztrain:$target" "$ctx" > build/docker-build.log 2>&1 \
  || { tail -30 build/docker-build.log; say "FAILED building $target"; exit 1; }
size=$(podman image inspect --format '{{.Size}}' "localhost/ztrain:$target")
build_s=$(( $(date +%s) - t0 ))
say "built localhost/ztrain:$target in $build_s s: $(( size / 1048576 )) MiB"
say "podman build --target cpu-test (runs the checks inside the image, as its user)"
# --no-cache: the self-test runs every time (a cached run would print nothing: an image whose
# binaries did not change would seem to fail its test)
podman build "${args[@]}" --no-cache --build-arg TEST_FROM="localhost/ztrain:$target" --target cpu-test -t localhost/ztrain:test \
  "$ctx" > build/docker-test.log 2>&1 || { tail -40 build/docker-test.log; say "FAILED: the image's self-test"; exit 1; }
grep 'docker_selftest:' build/docker-test.log | sed 's/^/  /'
user=$(podman image inspect --format '{{.Config.User}}' "localhost/ztrain:$target")
[ "$user" = ztrain ] || { say "the image runs as '$user', not ztrain"; exit 1; }
loss=$(grep -o 'docker_selftest: demo final loss [0-9.e+-]*' build/docker-test.log | awk '{print $5}')
mkdir -p bench/results
result=bench/results/docker_check-$target-$(date -u +%Y%m%dT%H%M%SZ).json
printf '{"target": "%s", "image_mib": %d, "build_seconds": %d, "user": "%s", "configs_checked": %d, "demo_final_loss": %s}\n' \
  "$target" "$(( size / 1048576 ))" "$build_s" "$user" "$(find configs -name "*.toml" | wc -l)" "${loss:-null}" > "$result"
say "results in $result"
say "ok: $target image ($(( size / 1048576 )) MiB) runs as $user; every shipped config checks and the demo trains in it"
say "not checked here: the cuda target (NVIDIA's base images cannot be fetched without a registry)"
