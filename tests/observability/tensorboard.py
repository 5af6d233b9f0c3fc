#!/usr/bin/python3
"""TensorBoard event files (`[run] tensorboard = true`), read back by an independent reader: the
TFRecord framing (length, masked CRC-32C of it, data, masked CRC-32C of the data) checked here with
a CRC-32C written from its definition (Castagnoli polynomial, reflected 0x82F63B78), and each
Event decoded with python3-protobuf from tests/observability/tensorboard_event.proto (written from
TensorFlow's published .proto files, compiled here by protoc).
- every number of every metrics.jsonl row (train, eval, memory, ranks, telemetry rows) is a scalar
  "<kind>/<field>" with the row's step and the value (as float32), and again "... vs tokens" at the
  tokens consumed so far; the resolved spec is a text summary;
- a planted wrong CRC in one record is detected by the reader;
- a run that crashes after its step-4 checkpoint's steps 5-6 were logged, resumed from step 4:
  a second file continues at step 5, and no step appears twice across the files.
"""
import glob
import json
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

failures, expect = testlib.checks()
HERE = os.path.dirname(os.path.abspath(__file__))


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path):
    """Every record's data; ValueError on a bad CRC or a cut record."""
    data = open(path, "rb").read()
    out, i = [], 0
    while i < len(data):
        if len(data) - i < 12:
            raise ValueError(f"{path}: a cut record header at {i}")
        n, crc = struct.unpack_from("<QI", data, i)
        if crc != masked(data[i:i + 8]):
            raise ValueError(f"{path}: length CRC wrong at {i}")
        body = data[i + 12:i + 12 + n]
        if len(body) != n or len(data) < i + 16 + n:
            raise ValueError(f"{path}: a cut record at {i}")
        (dcrc,) = struct.unpack_from("<I", data, i + 12 + n)
        if dcrc != masked(body):
            raise ValueError(f"{path}: data CRC wrong at {i}")
        out.append(body)
        i += 16 + n
    return out


def events(pb, paths):
    out = []
    for p in paths:
        for body in read_records(p):
            e = pb.Event()
            e.ParseFromString(body)
            out.append(e)
    return out


def expected_scalars(rows):
    """(tag, step, value) of every number of every row, and (tag + ' vs tokens', tokens, value)."""
    step, tokens, out = 0, 0, []

    def flat(obj, prefix):
        for k, v in obj.items():
            if isinstance(v, dict):
                yield from flat(v, f"{prefix}/{k}")
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step":
                yield f"{prefix}/{k}", v

    for r in rows:
        step = r.get("step", step)
        if r.get("kind") == "train" and "tokens_by_source" in r:
            tokens = int(sum(r["tokens_by_source"].values()))
        for tag, v in flat(r, r.get("kind", "run")):
            out.append((tag, step, v))
            out.append((tag + " vs tokens", tokens, v))
    return out


def main():
    args = testlib.arg_parser().parse_args()
    if not shutil.which("protoc"):
        print("SKIP: protoc not installed (Debian: protobuf-compiler, python3-protobuf)")
        return testlib.SKIP
    with testlib.workdir("zt_tb_") as work:
        subprocess.run(["protoc", f"--proto_path={HERE}", f"--python_out={work}", "tensorboard_event.proto"], check=True)
        sys.path.insert(0, work)
        import tensorboard_event_pb2 as pb  # noqa: E402
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 3)
        run = os.path.join(work, "run")
        ck = os.path.join(work, "ck")
        spec = testlib.tiny_spec(os.path.join(work, "spec.toml"), run, data, testlib.TINY_MODEL,
                                 {"micro_batch": 2, "global_batch": 4, "max_steps": 8, "eval_every": 3,
                                  "log_every": 1},
                                 run__tensorboard=True, run__telemetry_s=0.05, data__val=data,
                                 checkpoint__dir=ck, checkpoint__every_steps=4, checkpoint__async=False)
        # rank 0 dies in step 7: steps 5 and 6 are logged after the step-4 checkpoint
        p = testlib.run([args.ztrain, "train", spec], check=False, env={**os.environ, "ZTRAIN_FAULT_EXIT": "0:6"})
        expect(p.returncode != 0 and "step 6/" in p.stdout and "step 7/" not in p.stdout,
               f"train: {p.returncode} {p.stdout[-300:]} {p.stderr[-500:]}")
        files = sorted(glob.glob(os.path.join(run, "events.out.tfevents.*")))
        expect(len(files) == 1, f"event files {files}")
        rows = [json.loads(x) for x in open(os.path.join(run, "metrics.jsonl"))]
        ev = events(pb, files)
        expect(ev and ev[0].file_version == "brain.Event:2", "the first event is not the file version")
        got = {}
        for e in ev:
            for v in e.summary.value:
                if v.WhichOneof("value") == "simple_value":
                    got.setdefault((v.tag, e.step), []).append(v.simple_value)
        want = expected_scalars(rows)
        missing = [(t, s, v) for t, s, v in want
                   if not any(abs(x - struct.unpack("<f", struct.pack("<f", v))[0]) <= 1e-6 * max(1, abs(v))
                              for x in got.get((t, s), []))]
        kinds = sorted({r.get("kind") for r in rows})
        print(f"{len(rows)} metrics.jsonl rows of kinds {kinds}: {len(want)} scalars expected, "
              f"{sum(map(len, got.values()))} in the events, {len(missing)} missing")
        expect(not missing and len(want) == sum(map(len, got.values())), f"missing scalars: {missing[:5]}")
        expect({"train", "eval", "memory"} <= set(kinds), f"row kinds {kinds}")
        text = [v for e in ev for v in e.summary.value if v.metadata.plugin_data.plugin_name == "text"]
        expect(len(text) == 1 and text[0].tag == "config" and b"[model]" in text[0].tensor.string_val[0]
               and text[0].tensor.dtype == 7, "the resolved spec is not a text summary")

        # a planted wrong CRC is detected
        bad = os.path.join(work, "bad.tfevents")
        raw = bytearray(open(files[0], "rb").read())
        raw[len(raw) // 2] ^= 0x40
        open(bad, "wb").write(raw)
        try:
            read_records(bad)
            detected = False
        except ValueError as e:
            detected = True
            print(f"planted bit flip: {e}")
        expect(detected, "a flipped bit was not detected")

        # resumed from the step-4 checkpoint: steps 5 and 6 again, and no step twice; another run's
        # file in the same directory is left as it was
        other = os.path.join(run, "events.out.tfevents.1.otherhost.1.other_run")
        shutil.copyfile(files[0], other)
        raw_before = open(other, "rb").read()
        p = testlib.run([args.ztrain, "train", spec, "--resume", "auto"], check=False)
        expect(p.returncode == 0, f"resume: {p.returncode} {p.stderr[-500:]}")
        expect(open(other, "rb").read() == raw_before, "the resume changed another run's event file")
        os.remove(other)
        files = sorted(glob.glob(os.path.join(run, "events.out.tfevents.*")))
        ev = events(pb, files)
        loss_steps = [e.step for e in ev for v in e.summary.value if v.tag == "train/loss"]
        print(f"resumed from step 4: {len(files)} event files, train/loss at steps {loss_steps}")
        expect(len(files) == 2 and loss_steps == list(range(1, 9)), f"steps after the resume: {loss_steps}")
        rows = [json.loads(x) for x in open(os.path.join(run, "metrics.jsonl"))]
        got_loss = {e.step: v.simple_value for e in ev for v in e.summary.value if v.tag == "train/loss"}
        want_loss = {r["step"]: r["loss"] for r in rows if r.get("kind") == "train"}
        expect(got_loss.keys() == want_loss.keys() and all(abs(got_loss[s] - want_loss[s]) < 1e-5 * want_loss[s]
                                                             for s in want_loss), f"{got_loss} vs {want_loss}")
        # [run] tensorboard_dir: another directory (one logdir for several runs), created
        tb = os.path.join(work, "tb", "runA")
        p = testlib.run([args.ztrain, "train", spec, "--set", "train.max_steps=2", "--set", f"run.tensorboard_dir={tb}",
                         "--set", f"run.out_dir={os.path.join(work, 'run2')}", "--set", "checkpoint.dir=", "--set", "checkpoint.every_steps=0"], check=False)
        there = glob.glob(os.path.join(tb, "events.out.tfevents.*"))
        expect(p.returncode == 0 and len(there) == 1 and
               [e.step for e in events(pb, there) for v in e.summary.value if v.tag == "train/loss"] == [1, 2],
               f"tensorboard_dir: {p.returncode} {there} {p.stderr[-300:]}")
        p = testlib.run([args.ztrain, "train", spec, "--set", "train.max_steps=1",
                         "--set", f"run.tensorboard_dir={os.path.join(work, 'spec.toml', 'x')}",
                         "--set", f"run.out_dir={os.path.join(work, 'run3')}", "--set", "checkpoint.dir=", "--set", "checkpoint.every_steps=0"], check=False)
        expect(p.returncode == 2 and "tensorboard_dir" in p.stderr, f"uncreatable tensorboard_dir: {p.returncode} {p.stderr[-300:]}")
    return testlib.report(failures, "TensorBoard event files hold every metrics.jsonl scalar, framed and checksummed "
                                    "as TFRecord, and a resumed run continues them without a step twice")


if __name__ == "__main__":
    sys.exit(main())
