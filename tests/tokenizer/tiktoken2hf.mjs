// tiktoken2hf.mjs - turns a tiktoken rank file into the equivalent Hugging
// Face tokenizer.json (byte-level BPE), so that tests/cli/test-tokenizer-ref.sh
// can check primus's HuggingFaceTokenizer against Hugging Face's own
// tokenizers. The merges are recovered as tiktoken's own tools do: token r
// (>= 256) is BPE-encoded with the ranks below r, which leaves exactly two
// parts, the merged pair.
//   node tiktoken2hf.mjs RANKFILE OUTPUT_DIR             GPT-2: ByteLevel
//            with its regex, <|endoftext|> added after the ranks
//   node tiktoken2hf.mjs RANKFILE OUTPUT_DIR split-qwen2|split-o200k|qwen2
//            the same with a Split of Qwen2's or o200k's pattern, then
//            ByteLevel without regex (qwen2: with Qwen2's NFC normalizer)
//   node tiktoken2hf.mjs RANKFILE OUTPUT_DIR llama3 PKG  Llama 3's layout:
//            Split (Meta's pattern, Isolated) then ByteLevel without regex,
//            ignore_merges, the 256 special tokens of llama3-tokenizer-js
//            (PKG) as added tokens
import fs from 'node:fs';
import path from 'node:path';

const [rankFile, outDir, layout, llamaPkg] = process.argv.slice(2);
const ranks = new Map(); // latin1 string of the bytes -> rank
const byRank = [];
for (const line of fs.readFileSync(rankFile, 'utf8').split('\n')) {
  if (!line) continue;
  const [b64, r] = line.split(' ');
  const key = Buffer.from(b64, 'base64').toString('latin1');
  ranks.set(key, Number(r));
  byRank[Number(r)] = key;
}
// GPT-2's bytes_to_unicode.
const b2u = [];
let extra = 0;
for (let b = 0; b < 256; b++) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  b2u[b] = String.fromCodePoint(printable ? b : 256 + extra++);
}
const show = (s) => Array.from(s, (c) => b2u[c.charCodeAt(0)]).join('');

function splitBelow(tok, limit) {
  let parts = Array.from(tok);
  for (;;) {
    let best = -1, bestRank = limit;
    for (let i = 0; i + 1 < parts.length; i++) {
      const r = ranks.get(parts[i] + parts[i + 1]);
      if (r !== undefined && r < bestRank) { bestRank = r; best = i; }
    }
    if (best < 0) return parts;
    parts.splice(best, 2, parts[best] + parts[best + 1]);
  }
}

const vocab = {};
const merges = [];
let llama = null;
if (layout === 'llama3') {
  const { pathToFileURL } = await import('node:url');
  llama = (await import(pathToFileURL(path.join(llamaPkg, 'bundle/llama3-tokenizer-with-baked-data.js')).href)).default;
}
for (let r = 0; r < byRank.length; r++) {
  const tok = byRank[r];
  if (tok === undefined) continue;
  vocab[show(tok)] = r;
  // Llama 3 has tokens no merge reaches: its own merge list is used.
  if (tok.length < 2 || llama) continue;
  const parts = splitBelow(tok, r);
  if (parts.length !== 2) throw new Error(`rank ${r}: ${parts.length} parts`);
  merges.push(`${show(parts[0])} ${show(parts[1])}`);
}
const eot = byRank.length;
let added = [{ id: eot, content: '<|endoftext|>', single_word: false, lstrip: false,
               rstrip: false, normalized: true, special: true }];
let pre = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
let ignoreMerges = false;
// Other Split layouts over the same vocabulary: Qwen2's pattern (one digit
// per piece) and o200k's.
const splits = {
  'split-qwen2': "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  'split-o200k': "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
splits.qwen2 = splits['split-qwen2'];
let normalizer = null;
if (layout === 'qwen2') normalizer = { type: 'NFC' };
if (splits[layout]) {
  pre = { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: splits[layout] }, behavior: 'Isolated', invert: false },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] };
}
if (llama) {
  for (const e of [...llama.merges.entries()].sort((a, b) => a[1] - b[1])) merges.push(e[0]);
  const names = llama.vocabById.slice(eot);
  added = names.map((content, k) => ({ id: eot + k, content, single_word: false, lstrip: false,
                                       rstrip: false, normalized: false, special: true }));
  pre = { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
      behavior: 'Isolated', invert: false },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] };
  ignoreMerges = true;
}
for (const a of added) vocab[a.content] = a.id;
const json = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: added,
  normalizer,
  pre_tokenizer: pre,
  post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '',
           end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, ignore_merges: ignoreMerges,
           vocab, merges },
};
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, 'tokenizer.json'), JSON.stringify(json));
console.log(`${Object.keys(vocab).length} tokens, ${merges.length} merges`);
