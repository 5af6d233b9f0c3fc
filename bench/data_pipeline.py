#!/usr/bin/python3
"""Data pipeline throughput, as ratios measured in one run against the same s3rver:
- cold download: ztrain fetching every shard into an empty cache vs plain curl (SigV4) fetching the
  same objects one after the other (target: 0.9x or better);
- warm cache: the background loader's tokens/s (one rank) vs reading the same shard files
  sequentially with cat (tokens = bytes / 2);
- mixing: the warm loader over three sources (0.5 / 0.3 / 0.2) vs over one (target: 0.9x or better).
Usage: bench/data_pipeline.py [--mb 64]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import testlib  # noqa: E402



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--mb", type=int, default=64, help="dataset size in MB of shards")
    a = ap.parse_args()
    s3rver = os.path.join(HERE, "..", "tests", "data", "node_modules", ".bin", "s3rver")
    work = tempfile.mkdtemp(prefix="zt_bench_data_")
    proc = None
    try:
        text = os.path.join(work, "text.txt")
        with open(text, "w") as f:
            chunk = testlib.generated_text(200000, 1)
            while f.tell() < a.mb * 1_000_000 // 2:
                f.write(chunk)
        local = os.path.join(work, "local")
        testlib.run([os.path.join(a.build, "ztrain-tokenize"), "shards", "--vocab", "byte", "--shard-tokens",
                     "2000000", "--out", local, text])
        port = testlib.free_port()
        proc = subprocess.Popen([s3rver, "-d", os.path.join(work, "s3"), "-a", "127.0.0.1", "-p", str(port),
                                 "--configure-bucket", "zt", "--silent"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2)
        auth = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "S3RVER:S3RVER", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
        files = sorted(os.listdir(local))
        for f in files:
            testlib.run(["curl", "-s", "-f", *auth, "-T", os.path.join(local, f), f"http://127.0.0.1:{port}/zt/d/{f}"])
        shards = [f for f in files if f.endswith(".ztok")]
        total = sum(os.path.getsize(os.path.join(local, f)) for f in shards)
        # plain curl, sequential
        t0 = time.perf_counter()
        for f in shards:
            testlib.run(["curl", "-s", "-f", *auth, "-o", os.devnull, f"http://127.0.0.1:{port}/zt/d/{f}"])
        curl_s = time.perf_counter() - t0
        spec = os.path.join(work, "spec.toml")
        testlib.write_spec(spec, {
            "run": {"seed": 1, "device": "cpu"},
            "model": {"n_layer": 1, "n_head": 1, "d_model": 8, "vocab_size": 257, "seq_len": 1024},
            "train": {"micro_batch": 8, "global_batch": 8},
            "data": {"train": "s3://zt/d", "s3_endpoint": f"http://127.0.0.1:{port}", "s3_path_style": True,
                     "cache_dir": os.path.join(work, "cache"), "cache_limit": "100GB"},
        })
        env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER")
        r = json.loads(testlib.run([os.path.join(a.build, "ztrain-bench-data"), spec, "--batches", "2000"], env=env).stdout)
        # cat over the cached files
        cache_files = [os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(work, "cache")) for f in fs if f.endswith(".ztok")]
        t0 = time.perf_counter()
        subprocess.run(["cat", *cache_files], stdout=subprocess.DEVNULL, check=True)
        cat_s = time.perf_counter() - t0
        cat_tok = total / 2 / cat_s
        mb = total / 1e6
        print(f"dataset: {len(shards)} shards, {mb:.1f} MB, s3rver on loopback")
        print(f"cold download: ztrain {r['cold_mb_per_s']:.1f} MB/s vs curl {mb / curl_s:.1f} MB/s "
              f"-> {r['cold_mb_per_s'] / (mb / curl_s):.2f}x")
        print(f"warm loader: {r['warm_tokens_per_s'] / 1e6:.1f} M tokens/s (1 rank, micro_batch 8 x 1024) vs cat "
              f"{cat_tok / 1e6:.1f} M tokens/s -> {r['warm_tokens_per_s'] / cat_tok:.2f}x")
        # mixing: three sources (0.5 / 0.3 / 0.2) vs one, warm, like with like: three local directories vs
        # one, and three cached s3:// prefixes vs one
        for f in files:  # two more s3:// copies
            for prefix in ("d2", "d3"):
                testlib.run(["curl", "-s", "-f", *auth, "-T", os.path.join(local, f), f"http://127.0.0.1:{port}/zt/{prefix}/{f}"])
        for k in (2, 3):
            shutil.copytree(local, f"{local}{k}")
        base = {"run": {"seed": 1, "device": "cpu"},
                "model": {"n_layer": 1, "n_head": 1, "d_model": 8, "vocab_size": 257, "seq_len": 1024},
                "train": {"micro_batch": 8, "global_batch": 8},
                "data": {"s3_endpoint": f"http://127.0.0.1:{port}", "s3_path_style": True,
                         "cache_dir": os.path.join(work, "cache"), "cache_limit": "100GB"}}

        def mix_spec(name, uris):
            path = os.path.join(work, name + ".toml")
            testlib.write_spec(path, base)
            with open(path, "a") as f:
                for k, (uri, w) in enumerate(zip(uris, [0.5, 0.3, 0.2] if len(uris) == 3 else [1.0])):
                    f.write(f'\n[[data.sources]]\nname = "s{k}"\nuri = "{uri}"\nweight = {w}\n')
            return path

        for kind, one, three in [("local", [local], [local, local + "2", local + "3"]),
                                 ("cached s3://", ["s3://zt/d"], ["s3://zt/d", "s3://zt/d2", "s3://zt/d3"])]:
            specs = {"single": mix_spec("single", one), "mixed": mix_spec("mixed", three)}
            ratios, rate = [], {"single": [], "mixed": []}
            for _ in range(5):  # alternated: the median of the pairs' ratios (the machine is shared and noisy)
                for tag, path in specs.items():
                    out = testlib.run([os.path.join(a.build, "ztrain-bench-data"), path, "--batches", "20000"], env=env)
                    rate[tag].append(json.loads(out.stdout)["warm_tokens_per_s"])
                ratios.append(rate["mixed"][-1] / rate["single"][-1])
            med = sorted(ratios)[len(ratios) // 2]
            print(f"mixing, {kind}: 3 sources (0.5 / 0.3 / 0.2, warm) {sorted(rate['mixed'])[2] / 1e6:.1f} M tokens/s vs "
                  f"1 source {sorted(rate['single'])[2] / 1e6:.1f} M tokens/s (medians) -> {med:.2f}x, median of 5 "
                  f"pairs (range {min(ratios):.2f}-{max(ratios):.2f}; target >= 0.9)")
    finally:
        if proc:
            proc.terminate()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
