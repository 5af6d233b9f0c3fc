#!/usr/bin/python3
"""The fine-tuning path end to end (issue 47), the one docs/data.md shows a user:

1. pre-train a small GPT-2 on the demo text (data/demo/tinyshakespeare.txt, byte vocabulary) and
   export its checkpoint as Hugging Face safetensors (`ztrain export --format hf`);
2. conversations: questions about the play with fixed answers, in ChatML, each asked many times
   -> `ztrain-tokenize chat` (loss on the answers); the same conversations with the loss on the
   questions instead (--train-roles user), to measure the prompts' loss;
3. fine-tune from the export ([model] init_from) with [data] packing = "documents"; resumed from
   its step-60 checkpoint, it gives the same losses;
4. the fine-tuned model answers every question with its answer: greedy decoding in PyTorch
   (tests/torch_gpt.py) from the fine-tuned checkpoint's weights, the prompt rendered as ChatML
   renders a user turn followed by the assistant's header;
5. the prompt tokens are not trained: the answers' loss falls far (below a quarter of the
   pre-trained model's) while the questions' loss, which carries no gradient, does not fall as
   the answers' does (it keeps more than half of its pre-trained value). Both losses come from
   PyTorch on each document alone, with the shards' own loss masks.
"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

h5py, np, torch, torch_gpt = testlib.require("h5py", "numpy", "torch", "torch_gpt", what="PyTorch/h5py",
                                             hint="install python3-torch python3-h5py")
failures, expect = testlib.checks()
ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
T = 128
MODEL = {"n_layer": 2, "n_head": 4, "d_model": 64, "vocab_size": 260, "seq_len": T}
QA = {  # about the demo text (Coriolanus, Act I)
    "Who speaks first in the play?": "First Citizen.",
    "Whom do the citizens call chief enemy?": "Caius Marcius.",
    "Who tells the tale of the belly?": "Menenius.",
    "Which city is it?": "Rome.",
    "Who is the mother of Marcius?": "Volumnia.",
    "Who is the wife of Marcius?": "Virgilia.",
    "Who leads the Volsces?": "Tullus Aufidius.",
    "What do the citizens want?": "Corn at their own price.",
}


def spec(work, name, data, train, optim, **over):
    return testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, name), data, MODEL, train,
                             optim=optim, seed=3, threads=2, **over)


def ztrain(args, argv):
    p = testlib.run([args.ztrain, *argv], check=False)
    if p.returncode != 0:
        sys.exit(f"ztrain {' '.join(argv)}: exit {p.returncode}:\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
    return p


def load(step_dir):
    m = torch_gpt.GPT(MODEL["n_layer"], MODEL["n_head"], MODEL["d_model"], 4 * MODEL["d_model"], MODEL["vocab_size"], T)
    params = h5py.File(os.path.join(step_dir, "checkpoint.h5"), "r")["params"]
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(torch.from_numpy(params[n][()]))
    return m.eval()


def masked_loss(m, shards_dir):
    """The mean loss over every document's tokens with loss (each document alone)."""
    man = json.load(open(os.path.join(shards_dir, "manifest.json")))
    total, count = 0.0, 0
    for sh in man["shards"]:
        tokens, starts, flags = testlib.read_v2_shard(os.path.join(shards_dir, sh["file"]))
        for a, e in zip(starts, starts[1:] + [len(tokens)]):
            doc = torch.tensor(tokens[a:e])[None]
            target = torch.tensor([t if f else -1 for t, f in zip(tokens[a + 1:e], flags[a + 1:e])])[None]
            with torch.no_grad():
                n = int((target >= 0).sum())
                total += m(doc[:, :-1], target).item() * n
                count += n
    return total / count


def answer(m, special, question):
    """Greedy decoding after ChatML's user turn and the assistant's header, up to <|im_end|>."""
    start, end = special["<|im_start|>"], special["<|im_end|>"]
    ids = [start, *b"user\n", *question.encode(), end, *b"\n", start, *b"assistant\n"]
    out = []
    with torch.no_grad():
        for _ in range(40):
            nxt = int(m(torch.tensor([ids[-T:]]))[0, -1].argmax())
            if nxt == end:
                break
            out.append(nxt)
            ids.append(nxt)
    return bytes(b for b in out if b < 256).decode(errors="replace")


def main():
    args = testlib.arg_parser().parse_args()
    torch.set_num_threads(2)
    with testlib.workdir("zt_finetune_") as work:
        # 1. pre-training on the demo text, exported
        text = os.path.join(ROOT, "data", "demo", "tinyshakespeare.txt")
        pre_data = os.path.join(work, "text")
        testlib.run([args.tokenize, "shards", "--vocab", "byte", "--out", pre_data, text])
        pre_ck = os.path.join(work, "pre_ckpt")
        pre = spec(work, "pre", pre_data, {"micro_batch": 16, "global_batch": 16, "max_steps": 300, "log_every": 100},
                   {"lr": 3e-3, "warmup_steps": 20}, checkpoint__dir=pre_ck)
        p = ztrain(args, ["train", pre])
        print("pre-training:", [ln for ln in p.stdout.splitlines() if ln.startswith("step ")][-1])
        pre_step = os.path.join(pre_ck, "step_00000300")
        hf = os.path.join(work, "pretrained_hf")
        ztrain(args, ["export", pre_step, "--format", "hf", "--out", hf, "--dtype", "fp32"])
        # 2. conversations: every question 16 times, the loss on the answers; and on the questions
        jsonl = os.path.join(work, "qa.jsonl")
        with open(jsonl, "w") as f:
            for _ in range(16):
                for q, a in QA.items():
                    f.write(json.dumps({"messages": [{"role": "user", "content": q},
                                                     {"role": "assistant", "content": a}]}) + "\n")
        answers, prompts = os.path.join(work, "sft"), os.path.join(work, "sft_prompts")
        p = testlib.run([args.tokenize, "chat", "--vocab", "byte", "--template", "chatml", "--out", answers, jsonl])
        print(p.stderr.strip())
        testlib.run([args.tokenize, "chat", "--vocab", "byte", "--template", "chatml", "--out", prompts,
                     "--train-roles", "user", jsonl])
        special = json.load(open(os.path.join(answers, "manifest.json")))["tokenizer"]["added_tokens"]
        # 3. fine-tuning from the export, packed
        ft_ck = os.path.join(work, "ft_ckpt")
        ft = spec(work, "ft", answers, {"micro_batch": 8, "global_batch": 8, "max_steps": 120, "log_every": 20},
                  {"lr": 2e-3, "warmup_steps": 10}, checkpoint__dir=ft_ck, checkpoint__every_steps=60,
                  model__init_from=hf, data__packing="documents")
        p = ztrain(args, ["train", ft])
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("step ")]
        print("fine-tuning:", lines[0], "\n            ", lines[-1])
        expect(all("docs" in ln and "loss tokens" in ln for ln in lines), f"progress lines without docs / loss tokens: {lines}")
        train_rows = testlib.metrics(os.path.join(work, "ft"))
        expect(all(r.get("loss_tokens", 0) > 0 and r.get("documents", 0) > 0 for r in train_rows),
               f"metrics.jsonl train rows without loss_tokens / documents: {train_rows[:1]}")
        # exact resume of a packed run: from step 60, in a directory of its own, the same losses
        ztrain(args, ["train", ft, "--resume", os.path.join(ft_ck, "step_00000060"), "--set",
                      f"run.out_dir={os.path.join(work, 'ft_resumed')}", "--set",
                      f"checkpoint.dir={os.path.join(work, 'ft_resumed_ckpt')}"])
        resumed = {r["step"]: r["loss"] for r in testlib.metrics(os.path.join(work, "ft_resumed"))}
        whole = {r["step"]: r["loss"] for r in train_rows if r["step"] > 60}
        expect(resumed == whole and len(whole) == 3, f"resumed at step 60: losses {resumed}, uninterrupted {whole}")
        before, after = load(pre_step), load(os.path.join(ft_ck, "step_00000120"))
        # 4. the answers
        right = 0
        for q, a in QA.items():
            got = answer(after, special, q)
            right += got == a
            print(f"  {q!r} -> {got!r}" + ("" if got == a else f"   (expected {a!r})"))
        expect(right == len(QA), f"the fine-tuned model answered {right} of {len(QA)} questions")
        # 5. the prompts' loss is not trained
        la0, la1 = masked_loss(before, answers), masked_loss(after, answers)
        lp0, lp1 = masked_loss(before, prompts), masked_loss(after, prompts)
        print(f"answers' loss {la0:.3f} -> {la1:.3f} ({la1 / la0:.2f}x); questions' loss {lp0:.3f} -> {lp1:.3f} "
              f"({lp1 / lp0:.2f}x)")
        expect(la1 < la0 / 4, f"the answers' loss fell only from {la0:.3f} to {la1:.3f}")
        expect(lp1 > lp0 / 2 and math.isfinite(lp1), f"the questions' loss fell from {lp0:.3f} to {lp1:.3f}: were the "
                                                     "prompt tokens trained?")
    return testlib.report(failures, f"pre-trained, exported, fine-tuned from the export on packed conversations: all "
                                    f"{len(QA)} questions answered; the prompts' loss untrained")


if __name__ == "__main__":
    sys.exit(main())
