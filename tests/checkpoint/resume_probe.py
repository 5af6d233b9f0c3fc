#!/usr/bin/python3
"""The resume check: a checkpoint's probe batch, recomputed on resume.
A checkpoint written by 4 ranks (ZeRO-1) resumes with the check passed on 4 ranks (bit-equal: the
same layout), on 1 rank, on tensor 2 and on ZeRO-3 over 2 ranks. Two altered copies, each with
every block checksum rewritten so that `ztrain ckpt verify` still says ok, are refused on resume
(exit 2, the message naming the probe): one with a tensor transposed, one with two ranks' blocks
of the embedding swapped (a resharding bug's signature). --resume-unchecked resumes the altered
one anyway, with a warning. Skips (exit 77) without mpirun or h5py.
"""
import os
import shutil
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testlib  # noqa: E402


def main():
    args = testlib.arg_parser().parse_args()
    if testlib.mpirun_missing():
        return testlib.SKIP
    h5py, np = testlib.require("h5py", "numpy", hint="Debian: python3-h5py")
    failures, expect = testlib.checks(echo=True)
    with testlib.workdir("zt_probe_") as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 8000, 3)
        env = testlib.mpi_env()

        def spec(name, **over):
            return testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, "run_" + name), data,
                                     model=testlib.TINY_MODEL, train={"micro_batch": 2, "global_batch": 8,
                                                                      "max_steps": 30, "log_every": 5},
                                     optim={"lr": 3e-3}, seed=3, **over)

        def train(name, np_, sets=(), extra=()):
            cmd = testlib.train_cmd(args.ztrain, spec(name), sets, np_) + list(extra)
            return testlib.run(cmd, check=False, env=env, timeout=600)

        ck = os.path.join(work, "ck")
        p = train("save", 4, [f"checkpoint.dir={ck}", "checkpoint.exit_after=20", "parallel.zero_stage=1"])
        expect(p.returncode == 0, f"the saving run failed: {p.stderr[-800:]}")
        step = os.path.join(ck, "step_00000020")

        def resume(name, np_, ckpt, sets=(), extra=()):
            return train(name, np_, [f"checkpoint.dir={os.path.join(work, 'ck_' + name)}",
                                     f"checkpoint.resume={ckpt}", *sets], extra)

        # ---- the intact checkpoint passes on every layout
        for name, np_, sets, exact in [("same", 4, ["parallel.zero_stage=1"], True), ("one", 1, [], False),
                                        ("tp2", 2, ["parallel.tensor=2"], False),
                                        ("z3", 2, ["parallel.zero_stage=3"], False)]:
            p = resume(name, np_, step, sets)
            passed = "resume check passed" in p.stderr and ("bit-equal" in p.stderr) == exact
            expect(p.returncode == 0 and passed, f"{name}: the intact checkpoint: exit {p.returncode}: {p.stderr[-800:]}")
            print(f"intact checkpoint resumed on {name} ({np_} ranks): check passed{' bit-equal' if exact else ''}: "
                  f"{passed}")

        # ---- altered copies whose checksums still hold
        def rewrite(path, ds_name, values):
            with h5py.File(path, "r+") as f:
                f[ds_name][...] = values
                f[ds_name].attrs["crc32"] = zlib.crc32(np.ascontiguousarray(values, np.float32).tobytes())

        def blocks(ckpt, tensor):
            """(rank file, dataset name, shape, row0) of each block of params/<tensor>."""
            out = []
            for r in range(4):
                path = os.path.join(ckpt, f"rank_{r:05d}.h5")
                with h5py.File(path, "r") as f:
                    g = f["params"].get(tensor)
                    for k in (g.keys() if g is not None else []):
                        out.append((path, f"params/{tensor}/{k}", g[k].shape, int(g[k].attrs["row0"])))
            return out

        transposed = os.path.join(work, "transposed")
        shutil.copytree(step, transposed)
        name = "transformer.h.1.attn.c_proj.weight"  # square (d_model, d_model)
        whole = [b for b in blocks(transposed, name) if len(b[2]) == 2 and b[2][0] == b[2][1]]
        expect(len(whole) == 1, f"{name} is not one square block: {blocks(transposed, name)}")
        if whole:
            with h5py.File(whole[0][0], "r") as f:
                w = f[whole[0][1]][()]
            rewrite(whole[0][0], whole[0][1], w.T.copy())

        swapped = os.path.join(work, "swapped")
        shutil.copytree(step, swapped)
        emb = [b for b in blocks(swapped, "transformer.wte.weight")]
        pair = [(a, b) for a in emb for b in emb if a[0] < b[0] and a[2] == b[2]]
        expect(bool(pair), f"no two rank files hold equal-shaped blocks of the embedding: {emb}")
        if pair:
            a, b = pair[0]
            with h5py.File(a[0], "r") as fa, h5py.File(b[0], "r") as fb:
                va, vb = fa[a[1]][()], fb[b[1]][()]
            rewrite(a[0], a[1], vb)
            rewrite(b[0], b[1], va)

        for tag, ckpt in [("transposed", transposed), ("swapped", swapped)]:
            v = testlib.run([args.ztrain, "ckpt", "verify", ckpt], check=False)
            expect(v.returncode == 0, f"{tag}: ckpt verify should not see the change (checksums rewritten): {v.stdout}"
                                      f"{v.stderr[-300:]}")
            for np_, sets in [(4, ["parallel.zero_stage=1"]), (1, [])]:
                p = resume(f"{tag}{np_}", np_, ckpt, sets)
                refused = p.returncode == 2 and "resume check failed" in p.stderr and "probe batch" in p.stderr \
                    and ckpt in p.stderr
                expect(refused, f"{tag} on {np_} ranks: exit {p.returncode}, expected 2 naming the probe: "
                                f"{p.stderr[-800:]}")
                print(f"{tag} (checksums valid, verify ok) on {np_} ranks: refused by the resume check: {refused}")
                if np_ == 1:
                    print("  " + next((ln for ln in p.stderr.splitlines() if "resume check failed" in ln), "")[:400])
        p = resume("unchecked", 1, swapped, extra=["--resume-unchecked"])
        expect(p.returncode == 0 and "resuming anyway (--resume-unchecked)" in p.stderr,
               f"--resume-unchecked: exit {p.returncode}: {p.stderr[-600:]}")
        print(f"--resume-unchecked: resumed the swapped copy with a warning: {p.returncode == 0}")
    return testlib.report(failures, "the resume check passes intact checkpoints on every layout and refuses altered ones")


if __name__ == "__main__":
    sys.exit(main())
