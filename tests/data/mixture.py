#!/usr/bin/python3
"""Data mixtures ([[data.sources]], [[data.stages]]) on real sources and real ranks:
- three sources, one local, one on an S3-compatible server (s3rver), one over HTTP, weighted
  0.5 / 0.3 / 0.2 with a stage from step 15 (0.2 / 0.3 / 0.5): every step's 20 samples hold each
  source within 2 of its share, and every prefix of a stage within 1 (data/mixture.h's bound);
- the sequence of (sample, source, index in the source) identical on 1, 2 and 4 ranks and on
  tensor 2 x data 2 with ZeRO-3, and the losses equal within float reassociation;
- stopped at step 10 on 4 ranks and resumed on 4, 2 and 1 (and stopped at step 18 on 1 rank and
  resumed on 4): the losses of the uninterrupted run (bit-identical on the same layout), and the
  samples before and after the stop are the uninterrupted run's, none repeated or skipped;
- a resumed run whose mixture changed is refused (exit 2, naming the change) unless
  allow_mixture_change is on; a source holding other data under its name is refused;
- bad sources exit 2 naming the source and its line (another tokenizer, no sample); a remote
  source whose shard is gone for good ends the run naming the source;
- two val sources are each evaluated, val_loss their mean;
- a slow source (ZTRAIN_FAULT_SLOW_SOURCE) is named by the data-bound verdict.
Skips (exit 77) without node/s3rver, curl or mpirun.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testlib  # noqa: E402

KEY = testlib.S3_KEY
GB, STEPS, STAGE, T = 20, 30, 15, 32
WEIGHTS = {"web": 0.5, "code": 0.3, "books": 0.2}
STAGE_WEIGHTS = {"web": 0.2, "code": 0.3, "books": 0.5}


def main():
    args = testlib.arg_parser().parse_args()
    if not (testlib.s3rver_path() and shutil.which("curl")):
        print("SKIP: needs node, curl and s3rver (run `npm ci` in tests/data)")
        return testlib.SKIP
    if testlib.mpirun_missing():
        return testlib.SKIP
    failures, expect = testlib.checks(echo=True)
    procs = []
    with testlib.workdir("zt_mixture_", procs) as work:
        def dataset(name, words, seed, shard_tokens=4000):
            txt = os.path.join(work, name + ".txt")
            with open(txt, "w") as f:
                f.write(testlib.generated_text(words, seed))
            out = os.path.join(work, "sets", name)
            testlib.run([args.tokenize, "shards", "--vocab", "byte", "--shard-tokens", str(shard_tokens), "--out", out, txt])
            return out

        web = dataset("web", 6000, 1)
        code = dataset("code", 5000, 2)
        books = dataset("books", 4000, 3)
        # ---- servers: s3rver holds code, a plain HTTP server serves books
        s3, s3_port = testlib.start_s3rver(os.path.join(work, "s3"), "zt")
        procs.append(s3)
        for f in sorted(os.listdir(code)):
            testlib.run(["curl", "-s", "-f", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{KEY}:{KEY}",
                         "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T", os.path.join(code, f),
                         f"http://127.0.0.1:{s3_port}/zt/code/{f}"])
        http_port = testlib.free_port()
        procs.append(subprocess.Popen([sys.executable, "-m", "http.server", str(http_port), "--bind", "127.0.0.1",
                                       "--directory", os.path.join(work, "sets")], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        testlib.wait_port(http_port)
        uris = {"web": web, "code": "s3://zt/code", "books": f"http://127.0.0.1:{http_port}/books"}
        env = testlib.mpi_env(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=KEY)

        def write_spec(name, sources=None, stages=((STAGE, STAGE_WEIGHTS),), vals=(), **over):
            path = os.path.join(work, name + ".toml")
            testlib.tiny_spec(path, os.path.join(work, "run_" + name),
                              {"cache_dir": os.path.join(work, "cache"), "shuffle_block": 2, "sample_log": True,
                               "s3_endpoint": f"http://127.0.0.1:{s3_port}", "s3_path_style": True},
                              model={"n_layer": 1, "n_head": 2, "d_model": 16, "vocab_size": 257, "seq_len": T},
                              train={"micro_batch": 5, "global_batch": GB, "max_steps": STEPS, "log_every": 1},
                              optim={"lr": 3e-3}, seed=5, **over)
            with open(path, "a") as f:
                for src, (uri, w) in (sources or {n: (uris[n], WEIGHTS[n]) for n in WEIGHTS}).items():
                    f.write(f'[[data.sources]]\nname = "{src}"\nuri = "{uri}"\nweight = {w}\n\n')
                for src, uri in vals:
                    f.write(f'[[data.sources]]\nname = "{src}"\nuri = "{uri}"\nsplit = "val"\n\n')
                for step, ws in stages:
                    f.write(f"[[data.stages]]\nstep = {step}\nweights = {{ "
                            + ", ".join(f"{k} = {v}" for k, v in ws.items()) + " }\n\n")
            return path

        def train(name, np_=1, sets=(), spec=None, expect_rc=0):
            spec = spec or write_spec(name)
            p = testlib.run(testlib.train_cmd(args.ztrain, spec, sets, np_), check=False, env=env, timeout=600)
            if expect_rc is not None:
                expect(p.returncode == expect_rc, f"{name}: exit {p.returncode}, expected {expect_rc}: {p.stderr[-1500:]}")
            return p

        def losses(name):
            return {r["step"]: r["loss"] for r in testlib.metrics(os.path.join(work, "run_" + name), must_exist=False)}

        def samples(name):
            """The merged per-rank sample logs: [(sample, source, index, window)] by sample."""
            out, d = [], os.path.join(work, "run_" + name)
            for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
                if f.startswith("samples.rank"):
                    with open(os.path.join(d, f)) as fh:
                        out += [tuple(ln.split("\t")[1:]) for ln in fh.read().splitlines()[1:]]
            return sorted(((int(g), s, int(i), int(w)) for g, s, i, w in out))

        def close(a, b, tol=1e-5):
            return a.keys() == b.keys() and all(abs(a[k] - b[k]) <= tol * max(1.0, abs(b[k])) for k in b)

        # ---- the reference and the other layouts
        train("ref")
        ref, ref_samples = losses("ref"), samples("ref")
        expect(len(ref) == STEPS, f"reference run logged {len(ref)} steps")
        expect([s[0] for s in ref_samples] == list(range(GB * STEPS)),
               "the reference's sample log does not hold every sample once")
        for name, np_, sets in [("np2", 2, ()), ("np4", 4, ["train.micro_batch=5"]),
                                ("t2d2z3", 4, ["parallel.tensor=2", "parallel.zero_stage=3"])]:
            train(name, np_, sets)
            expect(samples(name) == ref_samples, f"{name}: the (sample, source, index) sequence differs from 1 rank's")
            expect(close(losses(name), ref), f"{name}: losses differ from 1 rank's beyond float reassociation")
        print(f"layouts 1, 2, 4 ranks and T2 D2 ZeRO-3: one sample sequence of {len(ref_samples)} samples")

        # ---- the realized proportions
        seq = [s[1] for s in ref_samples]
        worst_step, worst_prefix = 0.0, 0.0
        for lo, hi, w in [(0, STAGE * GB, WEIGHTS), (STAGE * GB, STEPS * GB, STAGE_WEIGHTS)]:
            count = dict.fromkeys(w, 0)
            for n, src in enumerate(seq[lo:hi], 1):
                count[src] += 1
                worst_prefix = max(worst_prefix, max(abs(count[k] - w[k] * n) for k in w))
            for a in range(lo, hi - GB + 1):  # every window of one step's size
                win = seq[a:a + GB]
                worst_step = max(worst_step, max(abs(win.count(k) - w[k] * GB) for k in w))
        # the bound holds (< 1) against the weights as held, the given ones rounded to multiples of 2^-32:
        # against the given ones, <= 1 up to that rounding
        expect(worst_prefix <= 1 + 1e-6, f"a prefix of a stage is {worst_prefix} samples from its share (bound: 1)")
        expect(worst_step <= 2 + 1e-6, f"a window of {GB} samples is {worst_step} samples from its share (bound: 2)")
        print(f"proportions: prefixes within {worst_prefix:.2f} samples, windows of {GB} within {worst_step:.2f} "
              f"(before step {STAGE}: {WEIGHTS}; after: {STAGE_WEIGHTS})")
        last = testlib.metrics(os.path.join(work, "run_ref"))[-1]
        want = {k: T * seq.count(k) for k in WEIGHTS}
        expect(last.get("tokens_by_source") == want, f"tokens_by_source {last.get('tokens_by_source')} != {want}")
        if shutil.which("gnuplot"):  # the report's mixture panel (a third row of plots)
            png = os.path.join(work, "mix.png")
            p = testlib.run([args.ztrain, "report", os.path.join(work, "run_ref"), "--out", png], check=False)
            with open(png, "rb") if os.path.exists(png) else open(os.devnull, "rb") as f:
                head = f.read(24)
            height = int.from_bytes(head[20:24], "big") if len(head) == 24 else 0
            expect(p.returncode == 0 and height == 1300, f"report with a mixture: exit {p.returncode}, height {height}: "
                                                         f"{p.stderr[-400:]}")
        else:
            print("report's mixture panel: not drawn (no gnuplot)")
        # within a source: its own order, epoch after epoch, every index once
        for k in WEIGHTS:
            idx = [s[2] for s in ref_samples if s[1] == k]
            expect(idx == list(range(len(idx))), f"source {k}: indices are not 0, 1, 2, ...")

        # ---- stop and resume on other layouts
        def stop_and_resume(tag, np_stop, stop_at, resumes):
            first = f"stop_{tag}"
            ck = os.path.join(work, "ck_" + tag)
            train(first, np_stop, [f"checkpoint.dir={ck}", f"checkpoint.exit_after={stop_at}"])
            before = samples(first)
            for np_, exact in resumes:
                name = f"resume_{tag}_np{np_}"
                ck2 = ck + f"_np{np_}"
                shutil.copytree(ck, ck2)
                train(name, np_, [f"checkpoint.dir={ck2}", "checkpoint.resume=auto"])
                got, after = losses(name), samples(name)
                want = {k: v for k, v in (ref4 if exact else ref).items() if k > stop_at}
                ok = got == want if exact else close(got, want)
                expect(ok, f"{name}: losses after the resume differ from the uninterrupted run"
                           f"{' (bit for bit)' if exact else ''}: {sorted(got.items())[:3]} vs {sorted(want.items())[:3]}")
                expect(before + after == ref_samples,
                       f"{name}: samples before and after the stop are not the uninterrupted run's "
                       f"({len(before)} + {len(after)} vs {len(ref_samples)}, repeated or skipped)")
                print(f"{tag}: {np_stop} ranks stopped at step {stop_at}, resumed on {np_}: "
                      f"{'bit-identical' if exact else 'equal'} losses, no sample repeated or skipped: {ok}")
        ref4 = losses("np4")
        stop_and_resume("a", 4, 10, [(4, True), (2, False), (1, False)])
        stop_and_resume("b", 1, 18, [(4, False)])

        # ---- a changed mixture, a source with other data
        ck = os.path.join(work, "ck_a")
        changed = {**{n: (uris[n], WEIGHTS[n]) for n in WEIGHTS}, "code": (uris["code"], 0.35)}
        p = train("changed", spec=write_spec("changed", changed), sets=[f"checkpoint.dir={ck}", "checkpoint.resume=auto"],
                  expect_rc=2)
        expect("source 'code' weight 0.3 -> 0.35" in p.stderr and "allow_mixture_change" in p.stderr,
               f"a changed weight: {p.stderr[-600:]}")
        p = train("changed_ok", spec=write_spec("changed_ok", changed),
                  sets=[f"checkpoint.dir={ck}", "checkpoint.resume=auto", "data.allow_mixture_change=true"])
        expect("the new mixture applies from step 10" in p.stderr, f"allowed change not logged: {p.stderr[-600:]}")
        p = train("reblocked", sets=[f"checkpoint.dir={ck}", "checkpoint.resume=auto", "data.allow_mixture_change=true",
                                     "data.shuffle_block=3"], expect_rc=2)
        expect("[data] shuffle_block = 2, this run has 3" in p.stderr, f"another shuffle_block: {p.stderr[-600:]}")
        other = {**{n: (uris[n], WEIGHTS[n]) for n in WEIGHTS}, "books": (code, 0.2)}
        p = train("other", spec=write_spec("other", other), expect_rc=2,
                  sets=[f"checkpoint.dir={ck}", "checkpoint.resume=auto", "data.allow_mixture_change=true"])
        expect("data source 'books'" in p.stderr and "holds other data" in p.stderr, f"other data: {p.stderr[-600:]}")
        print("changed mixture: refused (exit 2) naming the change; allowed and logged with allow_mixture_change; "
              "other data under a name, another shuffle_block: refused")

        # ---- bad sources
        odd = os.path.join(work, "sets", "odd")
        shutil.copytree(web, odd)
        with open(os.path.join(odd, "manifest.json")) as f:
            m = json.load(f)
        m["tokenizer"]["name"] = "byte-variant"
        with open(os.path.join(odd, "manifest.json"), "w") as f:
            json.dump(m, f)
        p = train("odd", spec=write_spec("odd", {"web": (web, 1), "odd": (odd, 1)}, stages=()), expect_rc=2)
        expect("data sources 'web' and 'odd' were tokenized differently" in p.stderr and "odd.toml:" in p.stderr,
               f"another tokenizer: {p.stderr[-600:]}")
        tiny = dataset("tiny", 3, 9)
        p = train("tiny", spec=write_spec("tiny", {"web": (web, 1), "tiny": (tiny, 1)}, stages=()), expect_rc=2)
        expect("data source 'tiny'" in p.stderr and "no shard holds more than seq_len" in p.stderr
               and "tiny.toml:" in p.stderr, f"an empty source: {p.stderr[-600:]}")
        # a remote source whose shard is gone for good: the run ends naming it, after a checkpoint of the
        # last step before the loader met it. The shard removed is the one the run first reads last.
        gone = dataset("gone", 2500, 11, shard_tokens=1000)
        gone_sources = {"web": (web, 1), "gone": (f"http://127.0.0.1:{http_port}/gone", 1)}
        train("gone_ref", spec=write_spec("gone_ref", gone_sources, stages=()))
        with open(os.path.join(gone, "manifest.json")) as f:
            entries = json.load(f)["shards"]
        ends = [0]
        for sh in entries:
            ends.append(ends[-1] + (sh["tokens"] - 1) // T)
        largest = max(range(len(entries)), key=lambda i: (entries[i]["bytes"], -i))  # checked by a HEAD at start
        first_step = {}
        for g, src, _, w in samples("gone_ref"):
            if src == "gone":
                k = next(i for i in range(len(ends) - 1) if ends[i] <= w < ends[i + 1])
                first_step.setdefault(k, g // GB)
        late = max((k for k in first_step if k != largest), key=first_step.get)
        shards = sorted(f for f in os.listdir(gone) if f.endswith(".ztok"))
        os.remove(os.path.join(gone, shards[late]))
        ck_gone = os.path.join(work, "ck_gone")
        # every rank waits for its next step's data before the step's agreement, so the 404 is met at a
        # step boundary however fast the steps are (the prefetcher may meet it earlier): a checkpoint first
        p = testlib.run(testlib.train_cmd(args.ztrain, write_spec("gone", gone_sources, stages=()),
                                          [f"checkpoint.dir={ck_gone}", f"data.cache_dir={os.path.join(work, 'cache_gone')}"]),
                        check=False, env=env, timeout=600)
        saved = [ln for ln in p.stdout.splitlines() if ln.startswith("a data source failed after step")]
        expect(p.returncode != 0 and "data source 'gone'" in p.stderr and shards[late] in p.stderr,
               f"a shard gone for good: exit {p.returncode}: {p.stderr[-800:]}")
        expect(bool(saved) and os.path.exists(os.path.join(ck_gone, "latest")),
               f"a shard gone for good: no checkpoint before the end: {p.stdout[-600:]}")
        print(f"bad sources: another tokenizer and an empty source exit 2 naming them; a shard gone (first read at "
              f"step {first_step[late] + 1}): exit {p.returncode} naming the source, after: "
              f"{saved[0] if saved else 'no checkpoint'}")
        # ---- two validation sets: each evaluated, val_loss their mean
        p = train("vals", spec=write_spec("vals", {"web": (web, 1)}, stages=(), vals=[("v_web", web), ("v_code", code)],
                                          train__max_steps=4, train__eval_steps=2))
        ev = testlib.metrics(os.path.join(work, "run_vals"), "eval", must_exist=False)
        by = ev[-1].get("val_loss_by_source", {}) if ev else {}
        expect(set(by) == {"v_web", "v_code"} and abs(ev[-1]["val_loss"] - sum(by.values()) / 2) < 1e-5
               and "v_code" in p.stdout, f"two val sources: {ev}")
        print(f"two val sources: {by}, val_loss {ev[-1]['val_loss'] if ev else None} (their mean)")

        # ---- a slow source: the data-bound verdict names it
        slow_env = dict(env, ZTRAIN_FAULT_SLOW_SOURCE="code:15")
        p = testlib.run(testlib.train_cmd(args.ztrain, write_spec("slow", {"web": (web, 0.7), "code": (code, 0.3)},
                                                                  stages=())), check=False, env=slow_env, timeout=600)
        verdicts = [r for r in testlib.metrics(os.path.join(work, "run_slow"), "verdict", must_exist=False)
                    if r.get("verdict") == "data-bound"]
        named = bool(verdicts) and "source 'code'" in verdicts[-1].get("evidence", "")
        expect(p.returncode == 0 and named, f"slow source: exit {p.returncode}, verdicts {verdicts[-1:]}: "
                                            f"{p.stderr[-600:]}")
        print(f"a slow source (each of its samples 15 ms): {verdicts[-1]['evidence'] if verdicts else 'no verdict'}")
    return testlib.report(failures, "mixtures: proportions, layouts, resume, changes, bad and slow sources")


if __name__ == "__main__":
    sys.exit(main())
