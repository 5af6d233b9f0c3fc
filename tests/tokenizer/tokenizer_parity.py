#!/usr/bin/python3
"""ztrain-tokenize against OpenAI's tiktoken (npm WASM build, its own built-in gpt2 and cl100k_base
encodings: nothing ztrain reads feeds the reference) with the real GPT-2 and cl100k ranks.

Byte-exact token ids on real text (tinyshakespeare), on hand-written hard cases (non-ASCII scripts,
emoji, combining marks, long whitespace runs, CRLF, contractions in any case, digits, special-token
strings) and on seeded random Unicode; decode(encode(x)) == x for all of them, byte-level included.
Skips (exit 77) with a message when ../shared/data or the npm reference is absent.
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import testlib  # noqa: E402

HARD_CASES = [
    "Hello, world! I'm here; you're there. HE'S IT'LL we'D They'VE",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "emoji 👋🏽 family 👨‍👩‍👧‍👦 rocket🚀flags 🇫🇷🇯🇵 keycap 1️⃣",
    "Ünïcödé naïve café résumé — “quotes” ‘single’ … ½ ¾ ™",
    "नमस्ते दुनिया, مرحبا بالعالم, שלום עולם",
    "spaces:" + " " * 37 + "tabs:\t\t\t\tnewlines:\n\n\n\n\nmixed: \t \n \r\n \u00a0\u00a0 \u2003end",
    "trailing whitespace run                                                        ",
    "\n" * 50 + "x" + " " * 200 + "\n",
    "numbers 1234567890 3.14159 1e-10 0x1F 12,345,678.90 ٣٤٥ ๑๒๓",
    "code: def f(x):\n    return x**2  # square\r\n\tif (a && b) { c++; }",
    "special <|endoftext|> in the middle <|fim_prefix|> and end<|endoftext|>",
    "a" * 3000,
    "zero\u200bwidth\u200djoiner and combining e\u0301 o\u0308",
    "'s's 's'S ''''ll 'LL",
]


def random_unicode(seed, n_chars):
    rng = random.Random(seed)
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x97F), (0x3040, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0x1F300, 0x1F6FF)]
    out = []
    for _ in range(n_chars):
        r = rng.random()
        if r < 0.15:
            out.append(rng.choice([" ", " ", "  ", "\n", "\t", "\r\n", "   \n"]))
        else:
            lo, hi = rng.choice(ranges)
            out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenize", required=True)
    ap.add_argument("--shared", default=os.path.join(HERE, "..", "..", "..", "shared", "data"))
    args = ap.parse_args()
    node_ref = os.path.join(HERE, "tiktoken_reference.cjs")
    failures = []

    with tempfile.TemporaryDirectory() as work:
        texts = {f"hard{i}": t for i, t in enumerate(HARD_CASES)}
        texts["random_unicode"] = random_unicode(11, 20000)
        texts["generated_words"] = testlib.generated_text(5000, 3)
        # single pre-tokenized pieces of 20 KB (the merge order over long pieces; issue 17 item 12)
        rng = random.Random(5)
        texts["long_piece_letters"] = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(20000))
        texts["long_piece_repeats"] = "ab" * 6000 + " " + "x" * 8000 + " " + "9" * 5000 + " " + "\u00e9" * 4000
        shakespeare = os.path.join(args.shared, "tinyshakespeare.txt")
        paths = {}
        for name, t in texts.items():
            paths[name] = os.path.join(work, name + ".txt")
            with open(paths[name], "w", encoding="utf-8", newline="") as f:
                f.write(t)
        have_shared = os.path.exists(os.path.join(args.shared, "gpt2.tiktoken"))
        if os.path.exists(shakespeare):
            paths["tinyshakespeare"] = shakespeare

        # byte-level needs no vocabulary: round trip always runs
        for name, p in paths.items():
            ids = testlib.run([args.tokenize, "encode", "--vocab", "byte", p]).stdout
            out = subprocess.run([args.tokenize, "decode", "--vocab", "byte"], input=ids.encode(),
                                 capture_output=True).stdout
            if out != open(p, "rb").read():
                failures.append(f"byte round trip differs: {name}")
        print(f"byte-level round trip: {len(paths)} texts")

        if not have_shared:
            print(f"SKIP: {args.shared} has no gpt2.tiktoken (../shared/data is not in a fresh clone); "
                  "byte-level round trips passed" if not failures else "")
            return 1 if failures else testlib.SKIP
        if not os.path.exists(os.path.join(HERE, "node_modules", "tiktoken")):
            print("SKIP: npm reference missing: run `npm ci` in tests/tokenizer")
            return 1 if failures else testlib.SKIP

        for vocab in ("gpt2", "cl100k_base"):
            vpath = os.path.join(args.shared, vocab + ".tiktoken")
            n_ids = 0
            for name, p in paths.items():
                for special in (False, True):
                    flag = ["--allow-special"] if special else []
                    ours = testlib.run([args.tokenize, "encode", "--vocab", vpath, *flag, p]).stdout.split()
                    ref = testlib.run(["node", node_ref, "encode", vpath, p, *flag]).stdout.split()
                    n_ids += len(ref)
                    if ours != ref:
                        first = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
                        failures.append(f"{vocab} {name} special={special}: ids differ at index {first} "
                                        f"(ours {ours[first:first + 5]}, tiktoken {ref[first:first + 5]})")
                    if not special:
                        out = subprocess.run([args.tokenize, "decode", "--vocab", vpath],
                                             input=" ".join(ours).encode(), capture_output=True).stdout
                        if out != open(p, "rb").read():
                            failures.append(f"{vocab} {name}: decode(encode(x)) != x")
            print(f"{vocab}: {len(paths)} texts x 2 modes, {n_ids} reference ids compared")

        # invalid UTF-8 is a clear input error, not a crash
        bad = os.path.join(work, "bad.txt")
        with open(bad, "wb") as f:
            f.write(b"valid start \xff\xfe broken")
        p = testlib.run([args.tokenize, "encode", "--vocab", os.path.join(args.shared, "gpt2.tiktoken"), bad], check=False)
        if p.returncode != 2 or "UTF-8" not in p.stderr or "offset 12" not in p.stderr:
            failures.append(f"invalid UTF-8: expected exit 2 naming offset 12, got {p.returncode}: {p.stderr.strip()}")

    return testlib.report(failures, "ztrain-tokenize is byte-exact with tiktoken and round-trips every text")


if __name__ == "__main__":
    sys.exit(main())
