#!/usr/bin/python3
"""Tokenizer throughput: ztrain-tokenize vs OpenAI's tiktoken (npm WASM build) on the same text.

Both encode the same file with the same ranks (encode_ordinary, vocabulary load excluded, best of
3); prints MB/s and the ratio, for 1 thread and for all threads (tiktoken's JS binding has one).
Needs ../shared/data (the real ranks) and `npm ci` in tests/tokenizer.
Then the pathological case (issue 17 item 12): one 400 KB pre-tokenized piece (a run of random
letters) against 400 KB of the text, both through ztrain-tokenize on 1 thread: the ratio of their
times says what a single long piece costs (tiktoken's own merge is quadratic there).
Usage: bench/tokenizer_vs_tiktoken.py [--text FILE] [--copies 4]
"""
import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import testlib  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build", "bin"))
    ap.add_argument("--shared", default=os.path.join(HERE, "..", "..", "shared", "data"))
    ap.add_argument("--text", default=None, help="default: tinyshakespeare.txt from --shared")
    ap.add_argument("--copies", type=int, default=4, help="concatenate the text this many times")
    a = ap.parse_args()
    text = a.text or os.path.join(a.shared, "tinyshakespeare.txt")
    ref = os.path.join(HERE, "..", "tests", "tokenizer", "tiktoken_reference.cjs")
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "input.txt")
        with open(text, "rb") as f:
            body = f.read()
        with open(path, "wb") as f:
            f.write(body * a.copies)
        mb = len(body) * a.copies / 1e6
        print(f"text: {text} x {a.copies} = {mb:.1f} MB")
        for vocab in ("gpt2", "cl100k_base"):
            v = os.path.join(a.shared, vocab + ".tiktoken")
            r = json.loads(testlib.run(["node", ref, "bench", v, path, "3"]).stdout)
            nproc = os.cpu_count()
            ours = {t: json.loads(testlib.run([os.path.join(a.build, "ztrain-tokenize"), "bench", "--vocab", v,
                                               "--threads", str(t), path]).stdout) for t in (1, nproc)}
            assert all(o["tokens"] == r["tokens"] for o in ours.values()), "token counts differ"
            print(f"{vocab}: tiktoken {mb / r['seconds']:6.2f} MB/s | ztrain-tokenize 1 thread "
                  f"{mb / ours[1]['seconds']:6.2f} MB/s ({r['seconds'] / ours[1]['seconds']:.2f}x) | "
                  f"{nproc} threads {mb / ours[nproc]['seconds']:6.2f} MB/s ({r['seconds'] / ours[nproc]['seconds']:.2f}x)")

        # one long piece vs ordinary text of the same size
        import random
        rng = random.Random(1)
        piece = os.path.join(work, "piece.txt")
        with open(piece, "w") as f:
            f.write("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(400_000)))
        normal = os.path.join(work, "normal.txt")
        with open(normal, "wb") as f:
            f.write((body * (400_000 // len(body) + 1))[:400_000])
        for vocab in ("gpt2", "cl100k_base"):
            v = os.path.join(a.shared, vocab + ".tiktoken")
            t = {name: json.loads(testlib.run([os.path.join(a.build, "ztrain-tokenize"), "bench", "--vocab", v,
                                               "--threads", "1", p]).stdout)["seconds"]
                 for name, p in (("piece", piece), ("normal", normal))}
            print(f"{vocab}: one 400 KB piece {t['piece']:.3f} s vs 400 KB of text {t['normal']:.3f} s "
                  f"({t['piece'] / t['normal']:.2f}x)")


if __name__ == "__main__":
    main()
