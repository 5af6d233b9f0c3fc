#!/usr/bin/python3
"""ZeRO-Infinity offload ([offload]) on the CPU backend, single process and under mpirun:
- bit-identical training: for each mode (optimizer "cpu", optimizer "nvme", optimizer "cpu" +
  params "cpu", optimizer "nvme" + params "cpu" or "nvme") the first batch's loss and gradients,
  10 steps' losses and the final parameters equal on-device training's to the last bit, at ZeRO
  stages 0-3, fp32 and bf16, GPT-2 and Llama, and with tensor 2 x data 2 ZeRO-3 under mpirun; likewise
  without clipping, where each group's host AdamW runs during backward (ZeRO 2-3);
- checkpoints save and load offloaded states where they live: 4 steps + resume + 4 steps equal 8
  steps bit for bit with optimizer "cpu" and "nvme", and an on-device checkpoint resumes offloaded;
- a model whose model states are 4x [run] device_memory_limit or more trains with everything on NVMe
  while the backend's measured peak stays under the limit; the same spec without offload exits 2
  at start with the bytes needed, the limit and the offload setting that would fit;
- start-up checks: a missing nvme_path, a file as nvme_path, a parameter offload without ZeRO-3,
  a pinned pool smaller than the offloaded states or larger than the machine's memory, too little
  free space (a 64 KiB tmpfs mounted for the test) exit 2 with one message; a tmpfs nvme_path
  trains; a ramfs one (no O_DIRECT) trains the same losses with a warning; two ranks sharing the
  machine's cores take a slice each;
- an I/O error on the NVMe file mid-run exits 1 naming the file, and the last complete checkpoint
  still verifies.
"""
import re
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

h5py, np = testlib.require("h5py", "numpy")
failures, expect = testlib.checks()
ENV = testlib.mpi_env()


def main():
    args = testlib.arg_parser().parse_args()
    if testlib.mpirun_missing():
        return testlib.SKIP
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 4)
        nvme = os.path.join(work, "nvme")
        os.makedirs(nvme)
        spec = testlib.tiny_spec(os.path.join(work, "spec.toml"), os.path.join(work, "run"), data, seed=9,
                                 model=testlib.TINY_MODEL,
                                 train={"micro_batch": 2, "global_batch": 4, "max_steps": 10, "log_every": 1},
                                 optim={"lr": 4e-3, "warmup_steps": 2, "grad_clip": 0.5}, parallel__bucket_mb=0.004,
                                 offload__nvme_path=nvme, offload__buffer_mb=0.0625, offload__io_depth=3)

        def dump(name, sets, np_=1, env=None):
            out = os.path.join(work, name + ".h5")
            argv = [*testlib.mpirun(np_), args.ztrain, "debug", "dump-state", spec, "--out", out, "--steps", "10",
                    *[a for s in sets for a in ("--set", s)]]
            p = testlib.run(argv, check=False, env=dict(ENV, **(env or {})), timeout=300)
            if p.returncode != 0:
                failures.append(f"{name}: exit {p.returncode}: {p.stderr[-1500:]}")
                return None
            return h5py.File(out, "r")

        def same(a, b):
            """Names of the dumped arrays that differ (loss, gradients, losses, final parameters)."""
            diff = []
            for g in ("out", "grads", "train", "final"):
                for k in a[g]:
                    if not np.array_equal(a[g][k][()], b[g][k][()]):
                        diff.append(f"{g}/{k}")
            return diff

        modes = [("cpu", "none"), ("cpu", "cpu"), ("nvme", "none"), ("nvme", "cpu"), ("nvme", "nvme")]
        cases = [(z, prec, arch) for z in (0, 1, 2, 3) for prec in ("fp32", "bf16") for arch in ("gpt2",)]
        cases += [(3, "fp32", "llama"), (2, "bf16", "llama")]
        llama = ["model.arch=llama", "model.n_kv_head=2", "model.d_ff=40"]
        for z, prec, arch in cases:
            base_sets = [f"parallel.zero_stage={z}", f"precision.compute={prec}"] + (llama if arch == "llama" else [])
            ref = dump(f"ref_z{z}_{prec}_{arch}", base_sets)
            if ref is None:
                continue
            for opt, params in modes:
                if params != "none" and z != 3:
                    continue
                name = f"z{z}_{prec}_{arch}_opt-{opt}_params-{params}"
                f = dump(name, base_sets + [f"offload.optimizer={opt}", f"offload.params={params}"])
                if f is None:
                    continue
                d = same(f, ref)
                expect(not d, f"{name}: differs from on-device training in {d[:4]}")
                print(f"{name}: loss, gradients, 10 steps and final parameters bit-identical to on-device: {not d}")
        # fp16 with dynamic loss scaling (skipped steps keep the NVMe tier's reads made during backward)
        fp16 = ["parallel.zero_stage=1", "precision.compute=fp16", "precision.initial_scale=1e7"]  # 3 steps overflow
        ref = dump("ref_fp16_z1", fp16)
        f = dump("fp16_z1_nvme", fp16 + ["offload.optimizer=nvme"])
        if ref is not None and f is not None:  # overflowed gradients hold NaN: equal where both do
            d = [f"{g}/{k}" for g in ("out", "grads", "train", "final") for k in ref[g]
                 if not np.array_equal(f[g][k][()], ref[g][k][()], equal_nan=True)]
            skipped = int(np.sum(~np.isfinite(f["train"]["grad_norm"][()])))  # overflowed: not applied
            expect(not d and 0 < skipped < 10, f"fp16 nvme: differs from on-device training in {d[:4]}; {skipped} skipped")
            print(f"fp16 ZeRO-1 optimizer nvme: bit-identical to on-device: {not d} (skipped steps: {skipped})")
        # without clipping (fp32/bf16: no loss scaling) each group's host AdamW runs during backward,
        # on its gradient of the last of 2 micro-batches
        for z, prec, params, extra, np_ in [(2, "fp32", "none", [], 1), (3, "bf16", "cpu", [], 1),
                                            (3, "fp32", "none", llama, 1), (3, "fp32", "cpu", ["parallel.tensor=2"], 4)]:
            base_sets = [f"parallel.zero_stage={z}", f"precision.compute={prec}", "optim.grad_clip=0"] + extra
            name = f"early_z{z}_{prec}_params-{params}_{np_}ranks{'_llama' if extra == llama else ''}"
            ref = dump("ref_" + name, base_sets, np_)
            f = dump(name, base_sets + ["offload.optimizer=cpu", f"offload.params={params}"], np_)
            if ref is not None and f is not None:
                d = same(f, ref)
                expect(not d, f"{name}: differs from on-device training in {d[:4]}")
                print(f"{name}: host AdamW during backward, bit-identical to on-device: {not d}")
        p = train(args, spec, os.path.join(work, "early"), ["optim.grad_clip=0", "parallel.zero_stage=2",
                                                             "offload.optimizer=cpu", "train.max_steps=2"])
        expect("host AdamW runs while backward goes on" in p.stderr, f"early update not used: {p.stderr[-500:]}")
        # tensor 2 x data 2, ZeRO-3, under mpirun
        sets = ["parallel.zero_stage=3", "parallel.tensor=2"]
        ref = dump("ref_T2D2", sets, 4)
        for opt, params in modes:
            f = dump(f"T2D2_opt-{opt}_params-{params}", sets + [f"offload.optimizer={opt}", f"offload.params={params}"], 4)
            if ref is not None and f is not None:
                d = same(f, ref)
                expect(not d, f"T2D2 optimizer {opt} params {params}: differs in {d[:4]}")
                print(f"T2 D2 ZeRO-3 optimizer {opt} params {params}: bit-identical to on-device: {not d}")
        # hybrid sharding with offload: 4 ranks in 2 replicas of 2, 2 micro-batches a step. An
        # offloaded shard is summed across replicas each micro-batch (it goes to the host at once),
        # the device's once a step: the same sums in another order, so close, not bit-identical
        hybrid = ["parallel.replicate=2", "train.micro_batch=1", "train.global_batch=8"]
        for z in (1, 3):
            on_device = dump(f"D4R2_zero{z}", hybrid + [f"parallel.zero_stage={z}"], 4)
            offloaded = dump(f"D4R2_zero{z}_opt-cpu", hybrid + [f"parallel.zero_stage={z}", "offload.optimizer=cpu"]
                             + (["offload.params=cpu"] if z == 3 else []), 4)
            if on_device is not None and offloaded is not None:
                # not the attention's bias: its key part's gradient is float noise that Adam turns
                # into full steps (tests/dist/dist_layouts.py compares its q and v parts)
                worst = max(float(np.max(np.abs(offloaded[g][k][()] - on_device[g][k][()])
                                         / (np.abs(on_device[g][k][()]) + 1e-3)))
                            for g in ("train", "final") for k in on_device[g] if not k.endswith("attn.c_attn.bias"))
                expect(worst <= 1e-4, f"D4 in 2 replicas ZeRO-{z}, offloaded: differs from on-device by {worst:.2e}")
                print(f"D4 in 2 replicas, ZeRO-{z}, optimizer{' and parameters' if z == 3 else ''} on the CPU: "
                      f"losses and final parameters within {worst:.1e} of on-device")
        # the NVMe tier's other I/O path (a thread per request, where io_uring is not available)
        f = dump("T2D2_nvme_threads", sets + ["offload.optimizer=nvme", "offload.params=nvme"], 4,
                 env={"ZTRAIN_NVME_IO": "threads"})
        if ref is not None and f is not None:
            d = same(f, ref)
            expect(not d, f"T2D2 nvme with I/O threads: differs in {d[:4]}")
            print(f"T2 D2 ZeRO-3 everything on NVMe through I/O threads: bit-identical to on-device: {not d}")
        checkpoints(args, work, spec)
        larger_than_device(args, work, data, nvme)
        startup_and_faults(args, work, spec, nvme)
    return testlib.report(failures, "offloaded optimizer states and parameters train bit-identically to on-device, "
                                    "checkpoint where they live, fit 4x the device limit, and fail with one message")


def records(out_dir):
    return [(r["step"], r["loss"], r["grad_norm"]) for r in testlib.metrics(out_dir)]


def train(args, spec, out, sets, env=None, check=True):
    argv = testlib.train_cmd(args.ztrain, spec, [f"run.out_dir={out}", f"checkpoint.dir={out}/ckpt", *sets])
    p = testlib.run(argv, check=False, env=dict(ENV, **(env or {})), timeout=300)
    if check and p.returncode != 0:
        failures.append(f"{out}: exit {p.returncode}: {p.stderr[-1200:]}")
    return p


def checkpoints(args, work, spec):
    for opt, params in (("cpu", "cpu"), ("nvme", "cpu"), ("nvme", "nvme")):
        sets = ["parallel.zero_stage=3", "precision.compute=bf16", f"offload.optimizer={opt}", f"offload.params={params}"]
        full, part = os.path.join(work, f"ck_full_{opt}_{params}"), os.path.join(work, f"ck_part_{opt}_{params}")
        train(args, spec, full, sets)
        train(args, spec, part, sets + ["checkpoint.exit_after=4"])
        p = train(args, spec, part, sets + ["checkpoint.resume=auto"])
        a, b = records(full), records(part)
        expect(len(a) == 10 and a == b, f"checkpoint with optimizer {opt} params {params}: resumed {b} vs {a}")
        print(f"checkpoint, optimizer {opt} + params {params}, ZeRO-3 bf16: 4 + resume + 6 steps equal 10 steps: {a == b}")
    # an on-device checkpoint continues offloaded (the states move to their tier on load)
    base = ["parallel.zero_stage=2"]
    full, part = os.path.join(work, "ck_dev_full"), os.path.join(work, "ck_dev_part")
    train(args, spec, full, base)
    train(args, spec, part, base + ["checkpoint.exit_after=4"])
    train(args, spec, part, base + ["checkpoint.resume=auto", "offload.optimizer=nvme"])
    a, b = records(full), records(part)
    expect(a == b, f"on-device checkpoint resumed with NVMe offload: {b} vs {a}")
    print(f"on-device checkpoint resumed with optimizer nvme: equal to on-device training: {a == b}")


def larger_than_device(args, work, data, nvme):
    """Model states 4x the device limit train with NVMe offload; the peak stays under the limit."""
    spec = testlib.tiny_spec(os.path.join(work, "big.toml"), os.path.join(work, "big"), data, seed=3,
                             model={"n_layer": 16, "n_head": 4, "d_model": 128, "vocab_size": 260, "seq_len": 16},
                             train={"micro_batch": 1, "global_batch": 1, "max_steps": 3, "log_every": 1},
                             run__device_memory_limit="8MiB", parallel__zero_stage=3, parallel__prefetch=1,
                             offload__optimizer="nvme", offload__params="nvme", offload__nvme_path=nvme)
    p = testlib.run([args.ztrain, "train", spec], check=False, env=ENV, timeout=300)
    m = re.search(r"(\d+(?:\.\d+)?)M parameters", p.stderr)
    peak = re.search(r"peak memory: [\d.]+ MiB allocated by the .* backend \((\d+) bytes\)", p.stderr)
    limit = 8 * 1048576
    states = 16 * float(m[1]) * 1e6 if m else 0
    expect(p.returncode == 0 and peak and int(peak[1]) <= limit and states >= 4 * limit,
           f"NVMe offload 4x the device: exit {p.returncode}, states {states:.0f} bytes, peak "
           f"{peak[1] if peak else None} bytes, limit {limit}: {p.stderr[-1200:]}")
    if peak:
        print(f"model states {states / 1048576:.1f} MiB ({states / limit:.1f}x the 8 MiB device limit) trained with "
              f"NVMe offload: device peak {int(peak[1]) / 1048576:.2f} MiB")
    p = testlib.run([args.ztrain, "train", spec, "--set", "offload.optimizer=none", "--set", "offload.params=none"],
                    check=False, env=ENV, timeout=300)
    expect(p.returncode == 2 and "[run] device_memory_limit has" in p.stderr and "[offload]" in p.stderr,
           f"without offload: exit {p.returncode}: {p.stderr[-800:]}")
    print(f"without offload: exit {p.returncode}: {p.stderr.strip().splitlines()[-1][:300] if p.stderr.strip() else ''}")


def startup_and_faults(args, work, spec, nvme):
    nofile = os.path.join(work, "a_file")
    open(nofile, "w").close()
    for sets, needle in [
            (["offload.optimizer=nvme", f"offload.nvme_path={work}/missing"], "not an existing directory"),
            (["offload.optimizer=nvme", f"offload.nvme_path={nofile}"], "not an existing directory"),
            (["offload.optimizer=nvme", "offload.nvme_path="], "[offload] nvme_path"),
            (["offload.optimizer=cpu", "offload.params=cpu", "parallel.zero_stage=2"], "parameter offload needs ZeRO-3"),
            (["offload.params=cpu", "parallel.zero_stage=3"], "parameter offload needs optimizer offload"),
            (["offload.optimizer=disk"], "[offload] optimizer: 'disk' is not one of")]:
        p = train(args, spec, os.path.join(work, "bad"), sets, check=False)
        expect(p.returncode == 2 and needle in p.stderr, f"{sets}: expected exit 2 with {needle!r}: {p.returncode} "
                                                         f"{p.stderr[-500:]}")
        print(f"{' '.join(sets)}: exit {p.returncode}: {p.stderr.strip().splitlines()[-1][:200] if p.stderr.strip() else ''}")
    # a directory this process may not write (root writes almost anywhere: /proc/sys where it is read-only)
    ro = next((d for d in ("/proc/sys", "/sys") if os.path.isdir(d) and not os.access(d, os.W_OK)), None)
    if ro:
        p = train(args, spec, os.path.join(work, "ro"), ["offload.optimizer=nvme", f"offload.nvme_path={ro}"], check=False)
        expect(p.returncode == 2 and "not writable" in p.stderr, f"read-only nvme_path: {p.returncode} {p.stderr[-400:]}")
        print(f"nvme_path {ro} (not writable): exit {p.returncode}")
    else:
        print("nvme_path not writable: not provoked (no directory here that this user cannot write)")
    if os.path.isdir("/dev/shm"):  # tmpfs: O_DIRECT only since Linux 6.6; buffered I/O with a warning before
        shm = tempfile.mkdtemp(dir="/dev/shm")
        p = train(args, spec, os.path.join(work, "shm"), ["offload.optimizer=nvme", f"offload.nvme_path={shm}"])
        expect(p.returncode == 0, f"tmpfs: {p.returncode} {p.stderr[-500:]}")
        print(f"tmpfs nvme_path: exit {p.returncode}; "
              f"{'buffered I/O with a warning' if 'does not support O_DIRECT' in p.stderr else 'O_DIRECT supported here'}")
        shutil.rmtree(shm, ignore_errors=True)
    # filesystems of our own where this user may mount them (root in CI): a 64 KiB tmpfs (too little
    # space for the states) and a ramfs (no O_DIRECT: buffered I/O with a warning, same training)
    with testlib.mounted(work, "tmpfs", "size=64k", "nvme_path") as small:
        if small:
            p = train(args, spec, os.path.join(work, "small"), ["offload.optimizer=nvme", f"offload.nvme_path={small}"],
                      check=False)
            expect(p.returncode == 2 and "the filesystem has" in p.stderr and "GiB free" in p.stderr,
                   f"too little space: {p.returncode} {p.stderr[-500:]}")
            print(f"nvme_path on a 64 KiB tmpfs: exit {p.returncode}: {p.stderr.strip().splitlines()[-1][:240]}")
    with testlib.mounted(work, "ramfs", "", "nvme_path") as ram:
        if ram:
            sets = ["offload.optimizer=nvme", "offload.params=nvme", "parallel.zero_stage=3"]
            base = train(args, spec, os.path.join(work, "ram_base"), ["parallel.zero_stage=3"])
            p = train(args, spec, os.path.join(work, "ram"), sets + [f"offload.nvme_path={ram}"], check=False)
            same = p.returncode == 0 and records(os.path.join(work, "ram")) == records(os.path.join(work, "ram_base"))
            expect(same and "does not support O_DIRECT" in p.stderr, f"ramfs: {p.returncode} {p.stderr[-500:]}")
            print(f"nvme_path on ramfs (no O_DIRECT): exit {p.returncode}, warned "
                  f"{'does not support O_DIRECT' in p.stderr}, losses equal on-device: {same}; base {base.returncode}")
    # the pinned pool: larger than the machine's memory is refused
    p = train(args, spec, os.path.join(work, "pinned_huge"), ["offload.optimizer=cpu", "offload.pinned_limit=64TiB"],
              check=False)
    expect(p.returncode == 2 and "more than its" in p.stderr, f"pinned_limit 64TiB: {p.returncode} {p.stderr[-400:]}")
    print(f"pinned_limit 64TiB: exit {p.returncode}")
    # the pinned pool: a bound below what the offloaded states need is an error at start
    p = train(args, spec, os.path.join(work, "pinned"), ["offload.optimizer=cpu", "offload.pinned_limit=64KiB"],
              check=False)
    expect(p.returncode == 2 and "of pinned host memory per rank" in p.stderr and "[offload] pinned_limit" in p.stderr,
           f"pinned_limit: {p.returncode} {p.stderr[-500:]}")
    print(f"pinned_limit 64KiB: exit {p.returncode}: {p.stderr.strip().splitlines()[-1][:220] if p.stderr.strip() else ''}")
    # two ranks on one machine, not bound by the launcher: each takes its own cores for AdamW
    p = testlib.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", args.ztrain, "train", spec,
                     "--set", f"run.out_dir={work}/bind", "--set", "offload.optimizer=cpu", "--set", "train.max_steps=2"],
                    check=False, env=ENV, timeout=300)
    bound = re.findall(r"local rank (\d) of 2 bound to cores (\d+)-(\d+)", p.stderr)
    cores = os.cpu_count() or 1
    expect(p.returncode == 0 and (cores < 2 or len({b[1] for b in bound}) == 2),
           f"core binding: exit {p.returncode}, {bound}: {p.stderr[-500:]}")
    print(f"2 ranks, --bind-to none, {cores} cores: {sorted(bound)}")
    # an I/O error mid-run: exit 1 naming the file; the checkpoint before it verifies
    out = os.path.join(work, "ioerr")
    p = train(args, spec, out, ["offload.optimizer=nvme", "checkpoint.every_steps=2", "checkpoint.async=false"],
              env={"ZTRAIN_FAULT_NVME_WRITES": "40"}, check=False)
    ck = os.path.join(out, "ckpt")
    latest = open(os.path.join(ck, "latest")).read().strip() if os.path.exists(os.path.join(ck, "latest")) else ""
    v = testlib.run([args.ztrain, "ckpt", "verify", os.path.join(ck, latest)], check=False) if latest else None
    expect(p.returncode == 1 and re.search(r"ztrain-states\.rank00000\.pid\d+: write of \d+ bytes at \d+ failed",
                                           p.stderr) and v is not None and v.returncode == 0,
           f"I/O error: exit {p.returncode}, latest {latest!r}, verify {v.returncode if v else None}: {p.stderr[-600:]}")
    print(f"NVMe write error: exit {p.returncode}; last complete checkpoint {latest} verifies: "
          f"{v is not None and v.returncode == 0}")


if __name__ == "__main__":
    sys.exit(main())
