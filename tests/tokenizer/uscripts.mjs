// uscripts.mjs - the UnicodeScripts check of
// tests/cli/test-tokenizer-scripts.sh: writes a tokenizer.json whose ids show
// every cut UnicodeScripts makes (UnicodeScripts, then Metaspace prepending
// "▁" to every piece; a character-level BPE of the 256 byte-fallback tokens
// and "▁"), and a text in which a code point with another script than
// primus' table (src/data/unicode_scripts.c) gives it, or a script where
// the table has none, or none where the table has one, changes the cuts:
//   - each run of code points of script A: r(A) c1 ... cK (no cut expected
//     inside), then r(B) ci for each (a cut expected before ci: B is Latin,
//     or Greek for A = Latin), where r(X) is the table's first code point of
//     script X;
//   - each run of code points without a script: "a" run "a", "α" run "α"
//     (no cut expected but before "α": a code point with a script cuts one
//     of the two);
//   - r(A) r(B) for every pair of scripts (a cut between each).
// Every code point but the surrogates, or with STEP > 1 the runs of one
// block of 1024 in STEP.
//   node uscripts.mjs NM TABLE_C OUTDIR [STEP]
// Writes OUTDIR/uscripts/tokenizer.json and OUTDIR/scripts.txt.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const [nm, table, out, stepArg] = process.argv.slice(2);
if (!out) {
  console.error('usage: uscripts.mjs NM TABLE_C OUTDIR [STEP]');
  process.exit(2);
}
const step = Number(stepArg || 1);
fs.mkdirSync(out, { recursive: true });
const require = createRequire(path.join(nm, 'x.js'));
const tk = require('tokenizers');

const T = new Uint8Array(0x110000);
const re = /\{0x([0-9A-F]+), 0x([0-9A-F]+), (\d+)\}/g;
let m, nr = 0;
const src = fs.readFileSync(table, 'utf8');
while ((m = re.exec(src))) {
  for (let c = parseInt(m[1], 16); c <= parseInt(m[2], 16); c++) T[c] = Number(m[3]);
  nr++;
}
if (nr < 100) {
  console.error(`uscripts.mjs: ${table}: only ${nr} ranges`);
  process.exit(1);
}
const rep = {};
for (let c = 0; c < 0x110000; c++) if (T[c] && !(T[c] in rep)) rep[T[c]] = c;
const A = 0x61, G = 0x3b1;
const cps = [];
const flush = (run, s) => {
  if (!run.length) return;
  if (!s) {
    cps.push(A, ...run, A, G, ...run, G);
    return;
  }
  const b = T[A] === s ? G : A;
  cps.push(rep[s], ...run);
  for (const c of run) cps.push(b, c);
};
for (let c0 = 0; c0 < 0x110000; c0 += 1024) {
  if ((c0 / 1024) % step) continue;
  let run = [], s = -1;
  for (let c = c0; c < c0 + 1024; c++) {
    if (c >= 0xd800 && c <= 0xdfff) continue;
    if (T[c] !== s || run.length === 64) {
      flush(run, s);
      run = [];
      s = T[c];
    }
    run.push(c);
  }
  flush(run, s);
}
const reps = Object.values(rep);
for (const a of reps) for (const b of reps) if (a !== b) cps.push(a, b);
let text = '';
for (let i = 0; i < cps.length; i += 4096) text += String.fromCodePoint(...cps.slice(i, i + 4096));
fs.writeFileSync(path.join(out, 'scripts.txt'), text);

const vocab = { '\u2581': 0 };
for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = b + 1;
const j = { version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
  pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'UnicodeScripts' },
    { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: false }] },
  post_processor: null, decoder: null,
  model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
    end_of_word_suffix: null, fuse_unk: false, byte_fallback: true, ignore_merges: false, vocab,
    merges: [] } };
const d = path.join(out, 'uscripts');
fs.mkdirSync(d, { recursive: true });
fs.writeFileSync(path.join(d, 'tokenizer.json'), JSON.stringify(j));
tk.Tokenizer.fromFile(path.join(d, 'tokenizer.json'));
console.log(`${cps.length} code points, ${reps.length} scripts`);
