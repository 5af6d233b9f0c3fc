#!/usr/bin/python3
"""Checkpoints in object storage, against a real S3-compatible server (s3rver, npm) behind the
fault-injecting proxy (a fifth of all requests, uploads included, fail: 503, 429, resets,
truncated replies):
- [checkpoint] dir = "s3://zt/ckpt/run": every checkpoint is written locally, then uploaded (rank
  files above upload_part_mb in several parts: S3 multipart), the run stops after 4 steps;
- with the local copy deleted, --resume auto finds the newest complete checkpoint in the store,
  downloads it and continues with the uninterrupted run's losses, on 2 ranks;
- keep_last applies in the store too; the credentials appear in no output.
Skips (exit 77) when node/s3rver or mpirun are missing (run `npm ci` in tests/data).
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

failures, expect = testlib.checks(echo=True)


def losses(out):
    return [(r["step"], r["loss"]) for r in testlib.metrics(out)]


def main():
    args = testlib.arg_parser().parse_args()
    if not testlib.s3rver_path() or not shutil.which("mpirun"):
        print("SKIP: needs node, s3rver (run `npm ci` in tests/data) and mpirun")
        return testlib.SKIP
    procs = []
    with testlib.workdir("zt_s3ckpt_", procs) as work:
        s3, s3_port = testlib.start_s3rver(os.path.join(work, "s3"), "zt")
        proxy, port = testlib.start_fault_proxy(s3_port, 0.2, methods="GET,PUT,POST,DELETE")
        procs += [s3, proxy]
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 9)
        # 2 layers of d_model 256: 1.6M parameters, 20 MB of states: 4 parts of 5 MiB per rank file
        spec = testlib.tiny_spec(os.path.join(work, "spec.toml"), os.path.join(work, "run"), seed=5,
                                 model={"n_layer": 2, "n_head": 4, "d_model": 256, "vocab_size": 260, "seq_len": 16},
                                 train={"micro_batch": 2, "global_batch": 4, "max_steps": 8, "log_every": 1},
                                 optim={"lr": 2e-3},
                                 data={"train": data, "s3_endpoint": f"http://127.0.0.1:{port}", "s3_path_style": True,
                                       "retries": 10},
                                 checkpoint__dir="s3://zt/ckpt/run", checkpoint__every_steps=2, checkpoint__keep_last=2,
                                 checkpoint__upload_part_mb=5)
        env = testlib.mpi_env(AWS_ACCESS_KEY_ID=testlib.S3_KEY, AWS_SECRET_ACCESS_KEY=testlib.S3_KEY)

        ref = testlib.run([args.ztrain, "train", spec, "--set", f"run.out_dir={work}/ref", "--set", "checkpoint.dir="
                           , "--set", "checkpoint.every_steps=0"], check=False, env=env)
        expect(ref.returncode == 0, f"reference run: {ref.stderr[-600:]}")
        out = os.path.join(work, "run")
        p = testlib.run([args.ztrain, "train", spec, "--set", "checkpoint.exit_after=4"], check=False, env=env,
                        timeout=600)
        st = testlib.proxy_stats(port)
        print(f"4 steps, checkpoints at 2 and 4 uploaded through the proxy: exit {p.returncode}; requests "
              f"{st['methods']}, {st['parts']} multipart parts, faults injected {st['faults']}")
        expect(p.returncode == 0 and "and s3://zt/ckpt/run/step_00000004" in p.stderr,
               f"s3 checkpoint run: exit {p.returncode}: {p.stderr[-1200:]}")
        expect(st["parts"] >= 8 and sum(st["faults"].values()) >= 3, f"multipart parts / faults: {st}")

        # the local copy is gone: the checkpoint comes from the store
        shutil.rmtree(os.path.join(out, "checkpoints"))
        p = testlib.run(testlib.train_cmd(args.ztrain, spec, np_=2, resume="auto"), check=False, env=env, timeout=600)
        got, want = losses(out), losses(f"{work}/ref")
        worst = max((abs(a[1] - b[1]) / b[1] for a, b in zip(got, want)), default=float("inf"))
        print(f"resumed on 2 ranks from the store after deleting the local copy: exit {p.returncode}, "
              f"downloaded: {'downloaded s3://zt/ckpt/run/step_00000004' in p.stderr}, losses vs uninterrupted "
              f"worst rel diff {worst:.1e}")
        expect(p.returncode == 0 and "downloaded s3://zt/ckpt/run/step_00000004" in p.stderr
               and [s for s, _ in got] == list(range(1, 9)) and worst <= 1e-5,
               f"resume from s3: exit {p.returncode}, {got} vs {want}: {p.stderr[-1200:]}")

        # keep_last = 2 in the store: steps 6 and 8 remain
        stored = sorted({dp.split(os.sep + "ckpt" + os.sep + "run" + os.sep)[1].split(os.sep)[0]
                         for dp, _, _ in os.walk(os.path.join(work, "s3"))
                         if os.sep + "ckpt" + os.sep + "run" + os.sep + "step_" in dp + os.sep})
        print(f"checkpoints left in the store (keep_last = 2): {stored}")
        expect(stored == ["step_00000006", "step_00000008"], f"store holds {stored}")
        expect(testlib.S3_KEY not in p.stdout + p.stderr, "a credential appeared in the output")
    return testlib.report(failures, "s3:// checkpoints upload through faults (multipart), resume from the store, keep_last")


if __name__ == "__main__":
    sys.exit(main())
