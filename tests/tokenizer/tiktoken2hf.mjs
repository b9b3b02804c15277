// tiktoken2hf.mjs - turns a GPT-2 style tiktoken rank file into the
// equivalent Hugging Face tokenizer.json (byte-level BPE, GPT-2 pattern),
// so that tests/cli/test-tokenizer-ref.sh can check primus's
// HuggingFaceTokenizer against gpt-tokenizer too. The merges are recovered
// as tiktoken's own tools do: token r (>= 256) is BPE-encoded with the
// ranks below r, which leaves exactly two parts, the merged pair.
//   node tiktoken2hf.mjs RANKFILE OUTPUT_DIR
import fs from 'node:fs';
import path from 'node:path';

const [rankFile, outDir] = process.argv.slice(2);
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
for (let r = 0; r < byRank.length; r++) {
  const tok = byRank[r];
  if (tok === undefined) continue;
  vocab[show(tok)] = r;
  if (tok.length < 2) continue;
  const parts = splitBelow(tok, r);
  if (parts.length !== 2) throw new Error(`rank ${r}: ${parts.length} parts`);
  merges.push(`${show(parts[0])} ${show(parts[1])}`);
}
const eot = byRank.length;
vocab['<|endoftext|>'] = eot;
const json = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [{ id: eot, content: '<|endoftext|>', single_word: false, lstrip: false,
                   rstrip: false, normalized: true, special: true }],
  normalizer: null,
  pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
  post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '',
           end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, vocab, merges },
};
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, 'tokenizer.json'), JSON.stringify(json));
console.log(`${Object.keys(vocab).length} tokens, ${merges.length} merges`);
