#!/bin/sh
# Inside an image (Dockerfile stage cpu-test), as its user: what a user runs first.
set -eu
echo "docker_selftest: running as $(id -un) (uid $(id -u)) in $(pwd)"
[ "$(id -u)" != 0 ] || { echo "docker_selftest: the image runs as root" >&2; exit 1; }
ztrain --help > /dev/null
for cfg in /opt/ztrain/configs/*.toml; do
  # a config that starts from another run's export ([model] init_from) is checked without it
  if grep -q '^init_from = ' "$cfg"; then
    ztrain check "$cfg" --set model.init_from= > /dev/null
  else
    ztrain check "$cfg" > /dev/null
  fi
  echo "docker_selftest: ztrain check $cfg: ok"
done
# the demo: byte-level shards of the shipped text, a short training run, a sample
mkdir -p /work/demo-data
ztrain-tokenize shards --vocab byte --out /work/demo-data/train /opt/ztrain/demo/tinyshakespeare.txt
ztrain train /opt/ztrain/configs/tiny-cpu.toml --set data.train=/work/demo-data/train --set data.val= \
  --set train.max_steps=20 --set train.log_every=10 --set train.sample_tokens=40 --set run.out_dir=/work/demo-run \
  --set run.threads=2
test -s /work/demo-run/metrics.jsonl
loss=$(grep '"kind":"train"' /work/demo-run/metrics.jsonl | tail -1 | grep -o '"loss":[0-9.e+-]*' | cut -d: -f2)
echo "docker_selftest: demo final loss $loss"
echo "docker_selftest: demo trained; every check passed"
