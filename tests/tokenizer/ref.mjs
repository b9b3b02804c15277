// ref.mjs - the reference side of tests/cli/test-tokenizer-ref.sh: encodes a
// UTF-8 file with the canonical Rust implementations and writes the ids as
// little-endian int32.
//   node ref.mjs NM tiktoken ENCODING INPUT OUTPUT   tiktoken's own encoding
//            (r50k_base, p50k_base, cl100k_base, o200k_base: ranks, pattern
//            and all from the npm tiktoken, the WASM build of its Rust core)
//   node ref.mjs NM llama3 RANKFILE INPUT OUTPUT     tiktoken with Meta's
//            Llama 3 pattern on a rank file
//   node ref.mjs NM hf TOKENIZER_JSON INPUT OUTPUT [DECODED]  Hugging Face
//            tokenizers (the Node bindings of its Rust library), no special
//            tokens added; DECODED: its decode of those ids (special tokens
//            kept), as UTF-8
//   node ref.mjs NM hf-special ...                   the same with the
//            post-processor's special tokens (add_special_tokens)
//   ... INPUT --bench [N]                            MB/s, one encode per line
//   node ref.mjs --compare A.bin B.bin               ids compared, mismatches
// NM is the npm cache's node_modules. Special-token text is encoded as
// ordinary text (encode_ordinary), as primus does.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const args = process.argv.slice(2);
if (args[0] === '--compare') {
  const ids = (f) => { const b = fs.readFileSync(f); return new Int32Array(b.buffer, b.byteOffset, b.length / 4); };
  const a = ids(args[1]), b = ids(args[2]);
  let first = -1, bad = 0;
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) { bad++; if (first < 0) first = i; }
  console.log(`${a.length} ids vs ${b.length}, ${bad} mismatched` +
              (first >= 0 ? ` (first at ${first}: ${a.slice(first, first + 5)} vs ${b.slice(first, first + 5)})` : ''));
  process.exit(bad ? 1 : 0);
}
const [nm, kind, model, input, output, reps] = args;
if (!nm || !kind || !model || !input || !output) {
  console.error('usage: ref.mjs NM tiktoken|llama3|hf MODEL INPUT OUTPUT|--bench [N]');
  process.exit(2);
}
const require = createRequire(path.join(nm, 'x.js'));
// Meta's pattern for Llama 3 (llama3/tokenizer.py).
const LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
let encode, name, decode;
if (kind === 'tiktoken') {
  const enc = require('tiktoken').get_encoding(model);
  encode = (s) => enc.encode_ordinary(s);
  name = `tiktoken ${model}`;
} else if (kind === 'llama3') {
  const { Tiktoken } = require('tiktoken/lite');
  const enc = new Tiktoken(fs.readFileSync(model, 'utf8'), {}, LLAMA3);
  encode = (s) => enc.encode_ordinary(s);
  name = 'tiktoken llama3';
} else if (kind === 'hf' || kind === 'hf-special') {
  const tok = require('tokenizers').Tokenizer.fromFile(model);
  const addSpecialTokens = kind === 'hf-special';
  encode = async (s) => (await tok.encode(s, null, { addSpecialTokens })).getIds();
  decode = async (ids) => tok.decode(ids, false);
  name = 'tokenizers';
} else {
  console.error(`ref.mjs: unknown kind ${kind}`);
  process.exit(2);
}
const buf = fs.readFileSync(input);
const text = buf.toString('utf8');
if (output === '--bench') {
  const lines = text.split('\n');
  let best = Infinity, tokens = 0;
  for (let r = 0; r < Number(reps || 3); r++) {
    const t0 = process.hrtime.bigint();
    let n = 0;
    for (const line of lines) if (line.length) n += (await encode(line)).length;
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    if (s < best) best = s;
    tokens = n;
  }
  console.log(`${name}: ${buf.length} bytes, ${tokens} tokens, ${best.toFixed(3)} s, ` +
              `${(buf.length / best / 1e6).toFixed(2)} MB/s`);
} else {
  const ids = await encode(text);
  fs.writeFileSync(output, Buffer.from(new Int32Array(ids).buffer));
  if (reps && decode) fs.writeFileSync(reps, await decode(ids));
  console.log(`${ids.length} ids`);
}
