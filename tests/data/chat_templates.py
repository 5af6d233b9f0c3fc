#!/usr/bin/python3
"""Chat conversations into fine-tuning shards (issue 47), against the templates as Hugging Face
renders them:
- 60 generated conversations (system prompts, multi-turn exchanges, empty contents, contents with
  surrounding whitespace of every kind Python's str.strip() knows, non-ASCII text, markup-like
  strings) rendered by `ztrain-tokenize render` are byte-equal to Jinja2 rendering the published
  templates' Jinja (Meta-Llama-3-8B-Instruct's and ChatML's chat_template, as
  transformers' apply_chat_template runs them: a sandboxed environment with trim_blocks and
  lstrip_blocks); a template file with ChatML's pieces renders as the built-in one;
- the bytes that carry loss are exactly each assistant turn's content and its end-of-turn token
  (planted: a user turn in the loss, caught by the same comparison);
- `ztrain-tokenize chat` writes version 2 shards that an independent reader here parses: every
  document decodes to its rendered text, the tokens with loss decode to the trained bytes, the
  manifest lists the template's added tokens; --max-tokens drops or truncates with the counts
  printed; training on the dataset without [data] packing is refused (exit 2), not read as a token
  stream, and with packing = "documents" it trains.
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

failures, expect = testlib.checks()

# The published templates (tokenizer_config.json "chat_template").
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
          "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
          "{{ content }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
TEMPLATES = {"llama3": (LLAMA3, "<|eot_id|>"), "chatml": (CHATML, "<|im_end|>")}
STRIP = " \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u1680\u2000\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
WORDS = ["hello", "Thou", "art", "été", "naïve", "日本語", "데이터", "🙂", "<|eot_id|>", "{role}", "\\n", "x" * 40,
         "end.", "question?", "answer:", "“quoted”", "tab\there", "line\nbreak"]


def conversations(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        conv = []
        if rng.random() < 0.5:
            conv.append({"role": "system", "content": "You are terse. " + rng.choice(WORDS)})
        for turn in range(rng.randint(1, 4)):
            for role in ("user", "assistant"):
                words = [rng.choice(WORDS) for _ in range(rng.randint(0, 8))]
                text = " ".join(words)
                if rng.random() < 0.3:  # surrounding whitespace of every kind str.strip() removes
                    text = "".join(rng.choice(STRIP) for _ in range(3)) + text + rng.choice(STRIP) * 2
                if rng.random() < 0.1:
                    text = ""
                conv.append({"role": role, "content": text})
        if i % 10 == 9:  # a conversation that ends on a user turn
            conv = conv[:-1] or conv
        out.append(conv)
    return out


def jinja_render(template, conv):
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=conv, bos_token="<|begin_of_text|>", add_generation_prompt=False)


def expected_trained(name, conv):
    """The bytes that carry loss: each assistant turn's rendered content and its end-of-turn token."""
    eot = TEMPLATES[name][1]
    return b"".join(((m["content"].strip() if name == "llama3" else m["content"]) + eot).encode()
                    for m in conv if m["role"] == "assistant")


def main():
    args = testlib.arg_parser().parse_args()
    try:
        import jinja2  # noqa: F401
    except ImportError:
        print("SKIP: python3-jinja2 is not installed (Debian: python3-jinja2)")
        return testlib.SKIP
    with testlib.workdir("zt_chat_") as work:
        convs = conversations(60, 7)
        src = os.path.join(work, "chats.jsonl")
        with open(src, "w") as f:
            for c in convs:
                f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")
            f.write(json.dumps({"prompt": "2+2?", "completion": " 4 "}) + "\n")  # a prompt/completion pair
        pairs = convs + [[{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": " 4 "}]]
        rendered = {}
        for name, (template, _) in TEMPLATES.items():
            p = testlib.run([args.tokenize, "render", "--template", name, src], check=False)
            expect(p.returncode == 0, f"render {name}: exit {p.returncode}: {p.stderr[-400:]}")
            lines = [json.loads(x) for x in p.stdout.splitlines()]
            rendered[name] = lines
            equal = trained_ok = 0
            for conv, line in zip(pairs, lines):
                want = jinja_render(template, conv)
                equal += line["text"] == want
                text = line["text"].encode()
                trained = b"".join(text[b:e] for b, e in line["trained"])
                trained_ok += trained == expected_trained(name, conv)
            print(f"{name}: {equal}/{len(pairs)} conversations byte-equal to Jinja2, {trained_ok} with exactly the "
                  "assistant turns trained")
            expect(len(lines) == len(pairs) and equal == len(pairs), f"{name}: {equal}/{len(pairs)} equal")
            expect(trained_ok == len(pairs), f"{name}: {trained_ok}/{len(pairs)} with the right trained bytes")
        # planted: the user turns trained too; the comparison must see it
        p = testlib.run([args.tokenize, "render", "--template", "llama3", "--train-roles", "assistant,user", src])
        wrong = sum(b"".join(l["text"].encode()[b:e] for b, e in l["trained"]) != expected_trained("llama3", c)
                    for c, l in zip(pairs, map(json.loads, p.stdout.splitlines())))
        print(f"planted (user turns in the loss): {wrong} conversations caught")
        expect(wrong > len(pairs) // 2, f"planted user-turn loss caught in only {wrong} conversations")
        # a template file with ChatML's pieces renders as the built-in ChatML
        tfile = os.path.join(work, "mine.toml")
        with open(tfile, "w") as f:
            f.write('message_prefix = "<|im_start|>{role}\\n"\nmessage_suffix = "<|im_end|>\\n"\n'
                    'special_tokens = ["<|im_start|>", "<|im_end|>"]\n')
        p = testlib.run([args.tokenize, "render", "--template", tfile, src])
        expect([json.loads(x) for x in p.stdout.splitlines()] == rendered["chatml"], "template file != chatml")
        p = testlib.run([args.tokenize, "render", "--template", os.path.join(work, "none.toml"), src], check=False)
        expect(p.returncode == 2 and "neither a built-in template" in p.stderr, f"missing template: {p.stderr}")

        # shards: byte vocabulary (ids 0-255 are bytes), the template's markup added after it
        out = os.path.join(work, "sft")
        p = testlib.run([args.tokenize, "chat", "--vocab", "byte", "--template", "llama3", "--out", out,
                         "--shard-tokens", "4000", src], check=False)
        expect(p.returncode == 0, f"chat: exit {p.returncode}: {p.stderr[-400:]}")
        print(p.stderr.strip())
        manifest = json.load(open(os.path.join(out, "manifest.json")))
        added = manifest["tokenizer"].get("added_tokens", {})
        expect(manifest["version"] == 2 and sorted(added.values()) == [257, 258, 259, 260]
               and manifest["tokenizer"]["n_vocab"] == 261, f"manifest: {manifest['version']} {added}")
        special = {v: k.encode() for k, v in added.items()}
        special[256] = b"<|endoftext|>"
        decode = lambda ids: b"".join(bytes([t]) if t < 256 else special[t] for t in ids)  # noqa: E731
        docs, trained = [], []
        for s in manifest["shards"]:
            tokens, starts, loss = testlib.read_v2_shard(os.path.join(out, s["file"]))
            expect(len(tokens) <= 4000 or len(starts) == 1, f"{s['file']}: {len(tokens)} tokens in {len(starts)} docs")
            for a, b in zip(starts, starts[1:] + [len(tokens)]):
                docs.append(decode(tokens[a:b]))
                trained.append(decode([t for t, l in zip(tokens[a:b], loss[a:b]) if l]))
        want = [l["text"].encode() for l in rendered["llama3"]]
        want_trained = [expected_trained("llama3", c) for c in pairs]
        keep = [i for i, c in enumerate(pairs) if want_trained[i]]  # conversations with nothing to train: dropped
        expect(docs == [want[i] for i in keep], f"shards: {len(docs)} documents, {len(keep)} expected or they differ")
        expect(trained == [want_trained[i] for i in keep], "shards: the tokens with loss are not the assistant turns")
        m = [int(x) for x in __import__("re").findall(r"(\d+) conversations kept .*?(\d+) of them truncated\), (\d+) dropped "
                                                        r"over --max-tokens, (\d+) dropped with nothing", p.stderr)[0]]
        expect(m == [len(keep), 0, 0, len(pairs) - len(keep)], f"counts printed {m}")
        # over --max-tokens: dropped, or truncated (cut to the limit)
        longest = max(len(d) for d in want)
        for mode in ("drop", "truncate"):
            p = testlib.run([args.tokenize, "chat", "--vocab", "byte", "--template", "llama3", "--out",
                             os.path.join(work, "sft_" + mode), "--max-tokens", str(longest // 2), "--overlong", mode,
                             src], check=False)
            print(f"--max-tokens {longest // 2} --overlong {mode}: {p.stderr.strip()}")
            expect(p.returncode == 0 and (" 0 dropped over" in p.stderr) == (mode == "truncate"), p.stderr)
        # without [data] packing a fine-tuning dataset is refused, not read as a token stream; with it, it trains
        spec = testlib.tiny_spec(os.path.join(work, "spec.toml"), os.path.join(work, "run"), out,
                                 dict(testlib.TINY_MODEL, vocab_size=261), {"max_steps": 1})
        p = testlib.run([args.ztrain, "train", spec], check=False)
        expect(p.returncode == 2 and "fine-tuning dataset" in p.stderr and "packing" in p.stderr,
               f"train on v2: {p.returncode} {p.stderr[-300:]}")
        p = testlib.run([args.ztrain, "train", spec, "--set", "data.packing=documents"], check=False)
        expect(p.returncode == 0 and "loss tokens" in p.stdout, f"train on v2, packed: {p.returncode} {p.stderr[-300:]}")
        # mixtures: a pre-training stream beside the fine-tuning set (its ids a subset of the set's)
        # trains; two templates' markup at the same ids (llama3's and ChatML's) is refused
        stream = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "stream"), 3000, 4)
        chatml = os.path.join(work, "sft_chatml")
        testlib.run([args.tokenize, "chat", "--vocab", "byte", "--template", "chatml", "--out", chatml, src])
        for other, ok in ((stream, True), (chatml, False)):
            mix = os.path.join(work, "mix.toml")
            with open(mix, "w") as f:
                f.write(f'[run]\nout_dir = "{work}/mix"\nthreads = 1\n[model]\nn_layer = 1\nn_head = 2\nd_model = 16\n'
                        f'vocab_size = 261\nseq_len = 32\n[train]\nmicro_batch = 2\nglobal_batch = 2\nmax_steps = 1\n'
                        f'[data]\npacking = "documents"\n[[data.sources]]\nname = "chat"\nuri = "{out}"\nweight = 0.8\n'
                        f'[[data.sources]]\nname = "other"\nuri = "{other}"\nweight = 0.2\n')
            p = testlib.run([args.ztrain, "train", mix], check=False)
            print(f"mixture with {os.path.basename(other)}: exit {p.returncode}"
                  + ("" if ok else f": {p.stderr.strip().splitlines()[-1]}"))
            expect(p.returncode == 0 if ok else p.returncode == 2 and "tokenized differently" in p.stderr,
                   f"mixture with {other}: exit {p.returncode}: {p.stderr[-400:]}")
        # a real BPE: the documents decode to the rendered text (tokenized whole, markup as single tokens)
        vocab = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data",
                             "gpt2.tiktoken")
        if os.path.exists(vocab):
            out = os.path.join(work, "sft_gpt2")
            p = testlib.run([args.tokenize, "chat", "--vocab", vocab, "--template", "chatml", "--out", out, src],
                            check=False)
            expect(p.returncode == 0, f"chat gpt2: {p.stderr[-300:]}")
            man = json.load(open(os.path.join(out, "manifest.json")))
            expect(man["tokenizer"]["added_tokens"] == {"<|im_start|>": 50257, "<|im_end|>": 50258},
                   f"gpt2 added tokens {man['tokenizer'].get('added_tokens')}")
            tokens, starts, loss = testlib.read_v2_shard(os.path.join(out, man["shards"][0]["file"]))
            first, first_loss = (tokens[:starts[1]], loss[:starts[1]]) if len(starts) > 1 else (tokens, loss)
            ends_trained = sum(1 for t, l in zip(first, first_loss) if t == 50258 and l)
            turns = sum(m["role"] == "assistant" for m in pairs[0])
            print(f"gpt2 + chatml: first document {len(first)} tokens, {first.count(50257)} <|im_start|>, "
                  f"{ends_trained} <|im_end|> with loss for {turns} assistant turns")
            expect(first[0] == 50257 and first.count(50257) == len(pairs[0]) and ends_trained == turns,
                   f"gpt2 first document: {first[:20]}")
        else:
            print("SKIP (part): ../shared/data/gpt2.tiktoken absent: the BPE check did not run")
    return testlib.report(failures, "chat templates render as Jinja2 renders the published ones; fine-tuning shards "
                                    "carry the documents and their loss masks")


if __name__ == "__main__":
    sys.exit(main())
