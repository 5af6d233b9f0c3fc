// Reference tokenizer for tests and benchmarks: OpenAI's tiktoken (npm, WASM) loaded with the same
// .tiktoken ranks and .meta.json (split regex, special tokens) that ztrain-tokenize reads.
//   node tiktoken_reference.cjs encode VOCAB.tiktoken INPUT [--allow-special]  -> ids on stdout
//   node tiktoken_reference.cjs bench VOCAB.tiktoken INPUT REPEATS             -> JSON timing
const fs = require("fs");
const { Tiktoken } = require("tiktoken/lite");

const [cmd, vocab, input, extra] = process.argv.slice(2);
const meta = JSON.parse(fs.readFileSync(vocab.replace(/\.tiktoken$/, ".meta.json"), "utf8"));
const enc = new Tiktoken(fs.readFileSync(vocab, "utf8"), meta.special_tokens, meta.pat_str);
const text = fs.readFileSync(input, "utf8");

if (cmd === "encode") {
  const ids = extra === "--allow-special" ? enc.encode(text, "all") : enc.encode_ordinary(text);
  process.stdout.write(Array.from(ids).join(" ") + "\n");
} else if (cmd === "bench") {
  const repeats = parseInt(extra || "3", 10);
  let best = Infinity, n = 0;
  for (let r = 0; r < repeats; r++) {
    const t0 = process.hrtime.bigint();
    n = enc.encode_ordinary(text).length;
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  process.stdout.write(JSON.stringify({ tokens: n, bytes: Buffer.byteLength(text), seconds: best }) + "\n");
} else {
  process.stderr.write("usage: tiktoken_reference.cjs encode|bench VOCAB INPUT [...]\n");
  process.exit(2);
}
enc.free();
