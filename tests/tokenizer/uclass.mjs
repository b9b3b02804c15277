// uclass.mjs - compares primus's code point classes (tokdump --classes: one
// byte per code point, PRM__U_* of src/data/tok-impl.h) with what the
// reference engines' regexes match: tiktoken's (Rust regex tables) and
// Hugging Face tokenizers' (Oniguruma), for \s, \p{L}, \p{Lu}, \p{Ll},
// \p{Lt}, \p{Lm}, \p{Lo}, \p{M}, \p{N}, on every code point but surrogates.
// Also dumps an engine's classes as files of code points (gen-unicode.py's
// ADDED_DIR): node uclass.mjs NM --dump DIR.
//   node uclass.mjs NM CLASSES
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const [nm, classesFile, dumpDir] = process.argv.slice(2);
const require = createRequire(path.join(nm, 'x.js'));
// PRM__U_OTHER, WS, LU, LL, LT, LM, LO, M, N.
const U = { OTHER: 0, WS: 1, LU: 2, LL: 3, LT: 4, LM: 5, LO: 6, M: 7, N: 8 };
const classes = [
  ['\\s', [U.WS]], ['\\p{L}', [U.LU, U.LL, U.LT, U.LM, U.LO]], ['\\p{Lu}', [U.LU]],
  ['\\p{Ll}', [U.LL]], ['\\p{Lt}', [U.LT]], ['\\p{Lm}', [U.LM]], ['\\p{Lo}', [U.LO]],
  ['\\p{M}', [U.M]], ['\\p{N}', [U.N]],
];
const cps = [];
for (let c = 0; c < 0x110000; c++) if (c < 0xd800 || c > 0xdfff) cps.push(c);
const chunks = [];
for (let i = 0; i < cps.length; i += 4096) chunks.push(String.fromCodePoint(...cps.slice(i, i + 4096)));

// Each engine keeps only what the class matches; the bytes come back as ids
// of a byte-level vocabulary (no merges), decoded to the matched characters.
let ranks = '';
for (let b = 0; b < 256; b++) ranks += Buffer.from([b]).toString('base64') + ' ' + b + '\n';
const { Tiktoken } = require('tiktoken/lite');
const { Tokenizer } = require('tokenizers');
const b2u = [];
let extra = 0;
for (let b = 0; b < 256; b++) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  b2u[b] = String.fromCodePoint(printable ? b : 256 + extra++);
}
const vocab = {};
for (let b = 0; b < 256; b++) vocab[b2u[b]] = b;
const tmp = fs.mkdtempSync(path.join(process.env.TMPDIR || '/tmp', 'uclass-'));

async function matched(engine, pat) {
  let enc;
  if (engine === 'tiktoken') {
    const t = new Tiktoken(ranks, {}, pat);
    enc = async (s) => t.encode_ordinary(s);
  } else {
    const j = { version: '1.0', added_tokens: [], normalizer: null, post_processor: null,
      pre_tokenizer: { type: 'Sequence', pretokenizers: [
        { type: 'Split', pattern: { Regex: pat }, behavior: 'Removed', invert: true },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false }] },
      decoder: null,
      model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
               end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab, merges: [] } };
    const f = path.join(tmp, 'class.json');
    fs.writeFileSync(f, JSON.stringify(j));
    const t = Tokenizer.fromFile(f);
    enc = async (s) => (await t.encode(s, null, { addSpecialTokens: false })).getIds();
  }
  const set = new Set();
  for (const s of chunks) for (const ch of Buffer.from(await enc(s)).toString('utf8')) set.add(ch.codePointAt(0));
  return set;
}

if (classesFile === '--dump') {
  fs.mkdirSync(dumpDir, { recursive: true });
  for (const [pat, name] of [['\\p{Lu}', 'Lu'], ['\\p{Ll}', 'Ll'], ['\\p{Lt}', 'Lt'], ['\\p{Lm}', 'Lm'],
                             ['\\p{Lo}', 'Lo'], ['\\p{M}', 'M'], ['\\p{N}', 'N']])
    fs.writeFileSync(path.join(dumpDir, name + '.txt'), [...await matched('tiktoken', pat)].join('\n') + '\n');
  process.exit(0);
}
const mine = fs.readFileSync(classesFile);
if (mine.length !== 0x110000) throw new Error(`${classesFile}: ${mine.length} bytes, expected 0x110000`);
let bad = 0, checked = 0;
for (const engine of ['tiktoken', 'tokenizers']) {
  for (const [pat, ks] of classes) {
    const got = await matched(engine, pat);
    for (const c of cps) {
      const want = ks.includes(mine[c]);
      if (want !== got.has(c)) {
        if (bad++ < 10) console.log(`U+${c.toString(16).toUpperCase()}: ${engine} ${pat} ${got.has(c)}, primus class ${mine[c]}`);
      }
      checked++;
    }
  }
}
fs.rmSync(tmp, { recursive: true });
console.log(`${checked} (code point, class, engine) checks, ${bad} mismatched`);
process.exit(bad ? 1 : 0);
