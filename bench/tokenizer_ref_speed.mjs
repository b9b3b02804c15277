// tokenizer_ref_speed.mjs - times a canonical Rust tokenizer on a text file,
// one document per line, the way `primus benchmark tokenizer --compare` times
// primus, and prints one JSON line: {"name", "seconds" (best of REPEAT),
// "bytes", "tokens", "mbps"}. The references are the npm packages that
// scripts/deps.sh installs: tiktoken (the WASM build of OpenAI's Rust core)
// and tokenizers (Hugging Face's Rust library through its Node binding).
//   node bench/tokenizer_ref_speed.mjs NM tiktoken ENCODING FILE [REPEAT]
//   node bench/tokenizer_ref_speed.mjs NM llama3 RANK_FILE FILE [REPEAT]
//   node bench/tokenizer_ref_speed.mjs NM hf TOKENIZER_JSON FILE [REPEAT]
// NM is the cache's node_modules. Text is encoded as ordinary text (no
// special tokens), as primus encodes it.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const [nm, kind, model, file, repeatArg] = process.argv.slice(2);
if (!nm || !kind || !model || !file) {
  console.error('usage: tokenizer_ref_speed.mjs NM tiktoken|llama3|hf MODEL FILE [REPEAT]');
  process.exit(2);
}
const require = createRequire(path.join(nm, 'x.js'));
// Meta's pattern for Llama 3 (llama3/tokenizer.py).
const LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
let encode, name;
if (kind === 'tiktoken') {
  const enc = require('tiktoken').get_encoding(model);
  encode = (s) => enc.encode_ordinary(s).length;
  name = `tiktoken ${model}`;
} else if (kind === 'llama3') {
  const { Tiktoken } = require('tiktoken/lite');
  const enc = new Tiktoken(fs.readFileSync(model, 'utf8'), {}, LLAMA3);
  encode = (s) => enc.encode_ordinary(s).length;
  name = 'tiktoken llama3';
} else if (kind === 'hf') {
  const tok = require('tokenizers').Tokenizer.fromFile(model);
  encode = async (s) => (await tok.encode(s, null, { addSpecialTokens: false })).getLength();
  name = `tokenizers ${path.basename(path.dirname(model))}/${path.basename(model)}`;
} else {
  console.error(`tokenizer_ref_speed.mjs: unknown kind ${kind}`);
  process.exit(2);
}
const buf = fs.readFileSync(file);
const lines = buf.toString('utf8').split('\n');
let best = Infinity, tokens = 0;
for (let r = 0; r < Number(repeatArg || 3); r++) {
  const t0 = process.hrtime.bigint();
  let n = 0;
  for (const line of lines) if (line.length) n += await encode(line);
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  if (s < best) best = s;
  tokens = n;
}
console.log(JSON.stringify({ name, seconds: best, bytes: buf.length, tokens,
                             mbps: buf.length / best / 1e6 }));
