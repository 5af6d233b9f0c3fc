#!/usr/bin/python3
"""Streaming shards from object storage, against a real S3-compatible server (s3rver, npm) and a
plain HTTP server, with a fault-injecting proxy (fault_proxy.py) in front:
- one run from s3://, from http:// and from a local directory gives identical losses;
- with a fifth of the requests failing (503, 429, resets, truncated bodies) the run completes with
  the same losses (so no sample was lost or repeated); and so it does with each fault kind alone
  (3 requests in 10 failing, each injected at least once; truncated bodies resumed by ranged GETs);
- the cache stays under cache_limit while evicting, at every moment of the run (its size, partial
  downloads included, sampled every 5 ms), and a limit too small for what must be cached at once
  is an error at start;
- 4 ranks on one machine download each shard once;
- a corrupt cached file is detected, deleted and fetched again: every corrupted shard, once;
- the same losses for D = 1, 2 and 4 with the same global batch;
- 403 and 404 fail at once with exit 2, naming the object; credentials appear nowhere.
Skips (exit 77) when node/s3rver or curl are missing (run `npm ci` in tests/data).
"""
import json
import os
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import testlib  # noqa: E402

failures, expect = testlib.checks(echo=True)
KEY = testlib.S3_KEY

wait_port, stats = testlib.wait_port, testlib.proxy_stats


def main():
    args = testlib.arg_parser().parse_args()
    if not (testlib.s3rver_path() and shutil.which("curl")):
        print("SKIP: needs node, curl and s3rver (run `npm ci` in tests/data)")
        return testlib.SKIP
    procs = []
    with testlib.workdir("zt_stream_", procs) as work:
        # ---- data: ~17 shards of 4000 tokens
        os.makedirs(os.path.join(work, "text"))
        txt = os.path.join(work, "text", "input.txt")
        with open(txt, "w") as f:
            f.write(testlib.generated_text(12000, 4))
        local = os.path.join(work, "local")
        testlib.run([args.tokenize, "shards", "--vocab", "byte", "--shard-tokens", "4000", "--out", local, txt])
        files = sorted(os.listdir(local))
        shards = [f for f in files if f.endswith(".ztok")]
        max_bytes = max(os.path.getsize(os.path.join(local, f)) for f in shards)

        # ---- servers: s3rver, a plain HTTP server, and fault proxies in front of them
        s3, s3_port = testlib.start_s3rver(os.path.join(work, "s3"), "zt")
        procs.append(s3)
        http_port = testlib.free_port()
        procs.append(subprocess.Popen([sys.executable, "-m", "http.server", str(http_port), "--bind", "127.0.0.1",
                                       "--directory", os.path.join(work)], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        wait_port(http_port)
        proxies = {}
        kinds = ["503", "429", "reset", "truncated"]
        for name, rate, only in [("clean", 0.0, kinds), ("faulty", 0.2, kinds), ("broken", 1.0, kinds)] + \
                [(k, 0.3, [k]) for k in kinds]:
            proc, proxies[name] = testlib.start_fault_proxy(s3_port, rate, kinds=",".join(only))
            procs.append(proc)
        # upload with a stock S3 client (curl's SigV4)
        for f in files:
            p = testlib.run(["curl", "-s", "-f", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{KEY}:{KEY}",
                             "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T", os.path.join(local, f),
                             f"http://127.0.0.1:{s3_port}/zt/data/{f}"], check=False)
            expect(p.returncode == 0, f"upload {f} failed: {p.stderr}")

        env = testlib.mpi_env(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=KEY)

        def spec(name, train, port=None, **over):
            d = {"train": train, "cache_dir": os.path.join(work, "cache_" + name), "shuffle_block": 2,
                 "prefetch": 1, "retries": 10, "timeout_s": 10.0}
            if port:
                d.update({"s3_endpoint": f"http://127.0.0.1:{port}", "s3_path_style": True})
            return testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, "run_" + name), d,
                                     model={"n_layer": 1, "n_head": 2, "d_model": 16, "vocab_size": 257, "seq_len": 32},
                                     train={"micro_batch": 4, "global_batch": 8, "max_steps": 30, "log_every": 1},
                                     optim={"lr": 3e-3}, seed=5, **over)

        def train(name, argv_prefix=(), **kw):
            p = testlib.run([*argv_prefix, args.ztrain, "train", spec(name, **kw)], check=False, env=env, timeout=600)
            losses = None
            out = os.path.join(work, "run_" + name)
            if p.returncode == 0 and os.path.exists(os.path.join(out, "metrics.jsonl")):
                losses = [r["loss"] for r in testlib.metrics(out)]
            else:
                expect(False, f"run {name}: exit {p.returncode}: {p.stderr[-1500:]}")
            return p, losses

        # ---- identical losses from every source
        _, ref = train("local", train=local)
        _, from_http = train("http", train=f"http://127.0.0.1:{http_port}/local")
        _, from_s3 = train("s3", train="s3://zt/data", port=s3_port)
        print(f"local losses {ref[0]:.6f} -> {ref[-1]:.6f}" if ref else "local run failed")
        expect(from_http == ref, "http:// losses differ from the local run")
        expect(from_s3 == ref, "s3:// losses differ from the local run")
        print(f"http:// and s3:// runs: identical losses: {from_http == ref and from_s3 == ref}")

        # ---- a fifth of the requests fail
        _, ref_long = train("local_long", train=local, train__max_steps=150, train__global_batch=32, train__micro_batch=16)
        _, faulty = train("faulty", train="s3://zt/data", port=proxies["faulty"], train__max_steps=150,
                          train__global_batch=32, train__micro_batch=16)
        st = stats(proxies["faulty"])
        print(f"faulty proxy: {st['requests']} requests, injected {st['faults']}, {st['ranged']} ranged GETs resumed downloads")
        expect(st["ranged"] >= 1, "no truncated download was resumed with a ranged GET")
        expect(sum(st["faults"].values()) >= 3, f"too few faults injected: {st['faults']}")
        expect(faulty == ref_long, "losses through the faulty proxy differ from the local run")
        # each kind alone
        for kind in kinds:
            _, alone = train(f"only_{kind}", train="s3://zt/data", port=proxies[kind])
            st = stats(proxies[kind])
            injected = st["faults"][kind]
            print(f"only {kind}: {st['requests']} requests, {injected} injected, {st['ranged']} ranged GETs; "
                  f"losses identical: {alone == ref}")
            expect(injected >= 1 and sum(st["faults"].values()) == injected, f"only {kind}: injected {st['faults']}")
            expect(alone == ref, f"only {kind}: losses differ from the local run")
            if kind == "truncated":
                expect(st["ranged"] >= 1, "only truncated: no download was resumed with a ranged GET")

        # ---- a store that always fails: the run stops after the retries, naming the object
        t0 = time.time()
        p = testlib.run([args.ztrain, "train", spec("broken", train="s3://zt/data", port=proxies["broken"],
                                                    data__retries=2)], check=False, env=env, timeout=120)
        expect(p.returncode == 1 and "s3://zt/data/manifest.json: giving up after 3 attempts; last error:" in p.stderr,
               f"always-failing store: exit {p.returncode}: {p.stderr[-400:]}")
        print(f"always-failing store: exit {p.returncode} after {time.time() - t0:.1f} s: "
              f"{p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}")

        # ---- cache limit and eviction: room for (2 + prefetch) blocks of 2 shards
        limit = 6 * max_bytes + 1000
        cache_dir = os.path.join(work, "cache_evict")
        peak = [0]
        running = threading.Event()
        running.set()

        def watch():  # the size of the cached shards during the run, partial downloads included
            while running.is_set():
                size = 0
                for dp, _, fs in os.walk(cache_dir):
                    for f in fs:
                        if not (f.endswith(".ztok") or ".ztok.tmp." in f):
                            continue
                        try:
                            size += os.path.getsize(os.path.join(dp, f))
                        except OSError:  # evicted between listing and stat
                            pass
                peak[0] = max(peak[0], size)
                time.sleep(0.005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            p, evict = train("evict", train="s3://zt/data", port=proxies["clean"],
                             train__max_steps=400, train__global_batch=32, train__micro_batch=32,
                             data__cache_limit=str(limit))
        finally:
            running.clear()
            watcher.join()
        cached = [os.path.join(dp, f) for dp, _, fs in os.walk(cache_dir) for f in fs if f.endswith(".ztok")]
        total = sum(os.path.getsize(f) for f in cached)
        fetched = [k for k in stats(proxies["clean"])["gets"] if k.endswith(".ztok")]
        print(f"cache limit {limit} B: {len(fetched)} shards fetched, {len(cached)} cached at the end ({total} B), "
              f"largest size seen during the run {peak[0]} B")
        expect(total <= limit, f"cache holds {total} B > limit {limit}")
        expect(0 < peak[0] <= limit, f"cache reached {peak[0]} B during the run > limit {limit}")
        expect(len(fetched) > len(cached), "no eviction happened")
        p, _ = testlib.run([args.ztrain, "train", spec("small", train="s3://zt/data", port=s3_port,
                                                       data__cache_limit=str(2 * max_bytes))], check=False, env=env), None
        expect(p.returncode == 2 and "is smaller than what must be cached at once" in p.stderr,
               f"too-small cache_limit: exit {p.returncode}: {p.stderr[-500:]}")

        # ---- one download per machine with 4 ranks; D = 2 and 4 give the same losses
        before = stats(proxies["clean"])["gets"]
        _, d4 = train("d4", argv_prefix=testlib.mpirun(4), train="s3://zt/data", port=proxies["clean"],
                      train__micro_batch=2)
        after = stats(proxies["clean"])["gets"]
        new = {k: after.get(k, 0) - before.get(k, 0) for k in after if k.endswith(".ztok")}
        new = {k: v for k, v in new.items() if v}
        print(f"4 ranks: {len(new)} shards downloaded, most downloads of one shard: {max(new.values()) if new else 0}")
        expect(new and max(new.values()) == 1, f"a shard was downloaded more than once per machine: {new}")
        # Same samples per step, partial sums added in another order: equal within float rounding.
        def close(a, b):
            return a is not None and b is not None and len(a) == len(b) and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(a, b))
        expect(close(d4, ref), f"D = 4 losses differ from D = 1: {d4} vs {ref}")
        _, d2 = train("d2", argv_prefix=testlib.mpirun(2), train="s3://zt/data", port=s3_port)
        expect(close(d2, ref), f"D = 2 losses differ from D = 1: {d2} vs {ref}")
        print(f"D = 2 and D = 4 from s3://: losses within 1e-5 of D = 1: {close(d2, ref) and close(d4, ref)}")

        # ---- corrupt cached files are replaced (every cached shard gets one flipped byte; the
        # ones the run reads must be fetched again, exactly once each)
        cache_d4 = os.path.join(work, "cache_d4")
        victims = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(cache_d4) for f in fs if f.endswith(".ztok"))
        for v in victims:
            with open(v, "r+b") as f:
                f.seek(100)
                b = f.read(1)
                f.seek(100)
                f.write(bytes([b[0] ^ 0xFF]))
        # The rerun covers a whole epoch, so it reads every shard, the corrupted ones included: each
        # of those must be fetched again exactly once (the others, never cached, once too).
        epoch_steps = json.load(open(os.path.join(local, "manifest.json")))["total_tokens"] // (8 * 32) + 5
        g0 = stats(proxies["clean"])["gets"]
        _, again = train("d4", train="s3://zt/data", port=proxies["clean"], train__micro_batch=2,
                         train__max_steps=epoch_steps)
        g1 = stats(proxies["clean"])["gets"]
        fetched = {os.path.basename(k): g1.get(k, 0) - g0.get(k, 0) for k in g1 if k.endswith(".ztok")}
        per_victim = {os.path.basename(v): fetched.get(os.path.basename(v), 0) for v in victims}
        print(f"{len(victims)} corrupted cached shards, a {epoch_steps}-step rerun: fetched again {per_victim}")
        expect(victims and all(n == 1 for n in per_victim.values()),
               f"corrupted cached shards were not each fetched again once: {per_victim}")
        _, epoch_ref = train("local_epoch", train=local, train__micro_batch=2, train__max_steps=epoch_steps)
        expect(close(again, epoch_ref), "losses after replacing corrupt cached shards differ from a local run")

        # ---- 403 / 404 fail at once; credentials are never shown
        # "At once" is counted, not timed: through the clean proxy, the manifest is asked for once.
        secret = "topsecret-do-not-print"
        bad_env = dict(env, AWS_ACCESS_KEY_ID="NOT-A-KEY", AWS_SECRET_ACCESS_KEY=secret)
        g0 = stats(proxies["clean"])["gets"]
        p = testlib.run([args.ztrain, "train", spec("denied", train="s3://zt/data", port=proxies["clean"])],
                        check=False, env=bad_env)
        g1 = stats(proxies["clean"])["gets"]
        asked = sum(n - g0.get(k, 0) for k, n in g1.items() if k.endswith("manifest.json"))
        expect(p.returncode == 2 and "HTTP 403" in p.stderr and "s3://zt/data/manifest.json" in p.stderr and asked == 1,
               f"403: exit {p.returncode} after {asked} manifest request(s): {p.stderr[-400:]}")
        expect(secret not in p.stderr + p.stdout, "the secret key appeared in the output")
        p = testlib.run([args.ztrain, "train", spec("missing", train="s3://zt/nothing-here", port=s3_port)], check=False, env=env)
        expect(p.returncode == 2 and "HTTP 404" in p.stderr, f"404: exit {p.returncode}: {p.stderr[-400:]}")
        p = testlib.run([args.ztrain, "train", spec("inspec", train="s3://zt/data", port=s3_port,
                                                    data__s3_secret_access_key=secret)], check=False, env=bad_env)
        resolved = os.path.join(work, "run_inspec", "config.resolved.toml")
        leaked = os.path.exists(resolved) and secret in open(resolved).read()
        expect(not leaked and secret not in p.stderr + p.stdout, "a secret from the spec leaked into output or config.resolved.toml")
    return testlib.report(failures, "s3://, http:// and local runs agree, survive faults, share one cache per machine and respect its limit")


if __name__ == "__main__":
    sys.exit(main())
