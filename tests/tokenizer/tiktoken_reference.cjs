// Reference tokenizer for tests and benchmarks: OpenAI's tiktoken (npm, WASM) with its own built-in
// encodings (ranks, split regex and special tokens shipped in the npm package), chosen by the name
// of the .tiktoken file ztrain-tokenize reads: gpt2.tiktoken -> "gpt2", cl100k_base.tiktoken ->
// "cl100k_base". Nothing ztrain reads (the .tiktoken ranks, the .meta.json regex) feeds the
// reference, so a wrong file on ztrain's side shows as a mismatch.
//   node tiktoken_reference.cjs encode VOCAB.tiktoken INPUT [--allow-special]  -> ids on stdout
//   node tiktoken_reference.cjs bench VOCAB.tiktoken INPUT REPEATS             -> JSON timing
const fs = require("fs");
const path = require("path");
const { get_encoding } = require("tiktoken");

const [cmd, vocab, input, extra] = process.argv.slice(2);
const enc = get_encoding(path.basename(vocab).replace(/\.tiktoken$/, ""));
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
