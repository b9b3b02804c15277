// hf-regex.mjs - writes tokenizer.json files whose Split pre-tokenizers and
// Replace normalizers use general regexes (src/data/regex.c), for
// tests/cli/test-tokenizer-regex.sh to check against Hugging Face
// tokenizers: DeepSeek V3's layout (its Sequence of Split regexes with
// \p{P}, \p{S}, CJK ranges, then ByteLevel without its regex) over a
// byte-level BPE trained here by the reference's own trainer, and layouts
// that put each construct regex.c implements (classes and their negations,
// lazy and possessive quantifiers, counted repeats, (?i:...), look-ahead and
// look-behind, anchors, \b, empty matches) behind each Split behaviour.
//   node hf-regex.mjs NM TRAIN_TEXT OUTDIR
// Prints the names of the layouts written (OUTDIR/NAME/tokenizer.json).
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const [nm, trainText, out] = process.argv.slice(2);
if (!out) {
  console.error('usage: hf-regex.mjs NM TRAIN_TEXT OUTDIR');
  process.exit(2);
}
const require = createRequire(path.join(nm, 'x.js'));
const tk = require('tokenizers');
fs.mkdirSync(out, { recursive: true });

const split = (pattern, behavior, invert = false) => ({ type: 'Split', pattern: { Regex: pattern },
  behavior, invert });
const bytelevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false };
// DeepSeek V3's pre-tokenizer, as its tokenizer.json has it.
const DEEPSEEK = [
  split('\\p{N}{1,3}', 'Isolated'),
  split('[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+', 'Isolated'),
  split('[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|' +
        ' ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+', 'Isolated'),
  bytelevel,
];

// A byte-level BPE trained by the reference under DeepSeek's pre-tokenizer.
const t = new tk.Tokenizer(tk.BPE.empty());
t.setPreTokenizer(tk.byteLevelPreTokenizer(false));
t.train([trainText]);
const f = path.join(out, 'trained.json');
t.save(f);
const base = JSON.parse(fs.readFileSync(f, 'utf8'));
// Every byte in the vocabulary, so no piece is unknown.
{
  const b2u = [];
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    b2u[b] = String.fromCodePoint(printable ? b : 256 + extra++);
  }
  let next = Math.max(...Object.values(base.model.vocab)) + 1;
  for (const u of b2u) if (!(u in base.model.vocab)) base.model.vocab[u] = next++;
}
base.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };

function write(name, normalizer, pretok, decoder) {
  const j = JSON.parse(JSON.stringify(base));
  j.normalizer = normalizer;
  if (decoder) j.decoder = decoder;
  j.pre_tokenizer = { type: 'Sequence', pretokenizers: pretok };
  const d = path.join(out, name);
  fs.mkdirSync(d, { recursive: true });
  fs.writeFileSync(path.join(d, 'tokenizer.json'), JSON.stringify(j));
  tk.Tokenizer.fromFile(path.join(d, 'tokenizer.json')); // the reference reads it back
  console.log(name);
}

write('deepseek-v3', null, DEEPSEEK);
// Each behaviour with classes and negations, categories by long and short name.
write('rx-behaviours', null, [
  split('\\p{Ps}|\\p{Pe}|\\p{Pi}|\\p{Pf}', 'MergedWithPrevious'),
  split('[\\p{Sm}\\p{Sc}\\p{Sk}]+', 'MergedWithNext'),
  split('\\P{L}\\p{Lu}', 'Contiguous'),
  split('[\\p{Zs}\\t]+', 'Removed'),
  split('[^\\p{Letter}\\p{Mark}\\p{Decimal_Number}]', 'Isolated', true),
  bytelevel,
]);
// Quantifiers: lazy, possessive, counted, stacked; alternation; groups.
write('rx-quantifiers', null, [
  split('\\d{2,4}?|\\w{5}|[aeiou]++|(?:ab|cd)+|x{2}+', 'Isolated'),
  split('\\p{L}+?(?=\\p{Lu})|\\s++(?!\\S)', 'MergedWithPrevious'),
  split("(?i:'s|'t|'re|'ve|'m|'ll|'d|the|and)", 'Isolated'),
  bytelevel,
]);
// \b and \B inside (?i:...), around words of every case.
write('rx-icase-b', null, [
  split("(?i:\\bthe\\b|\\Bing\\b|\\b'?s\\B|a\\B)", 'Isolated'),
  split('(?i:\\bof\\b|\\Bed\\B)|(?-i:\\bI\\b)', 'MergedWithNext'),
  bytelevel,
]);
// Anchors, \b, look-behind, '.', empty matches, \h, \x{..}.
write('rx-anchors', null, [
  split('^\\s*|\\s*$', 'Removed'),
  split('\\b', 'Isolated'),
  split('(?<=[.!?])\\s|\\h+|\\x{2014}|\\u2019|.\\z', 'MergedWithNext'),
  split('\\p{C}+|\\p{^L}?\\p{Nd}*', 'Contiguous'),
  bytelevel,
]);
// Replace normalizers by regex (runs of White_Space, format characters,
// look-arounds), then DeepSeek's pre-tokenizer; a Replace decoder by regex.
write('rx-replace', { type: 'Sequence', normalizers: [
  { type: 'Replace', pattern: { Regex: '\\s{2,}' }, content: ' ' },
  { type: 'Replace', pattern: { Regex: '[\\p{Cf}\\p{Co}]' }, content: '' },
  { type: 'Replace', pattern: { Regex: '(?<=\\p{N})\\s(?=\\p{L})' }, content: '_' },
  { type: 'Replace', pattern: { Regex: '\\p{Pd}+' }, content: '\u2013-' },
] }, DEEPSEEK, { type: 'Sequence', decoders: [
  { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  { type: 'Replace', pattern: { Regex: '\\p{Pd}|[aeiou]{2}' }, content: '~' }] });
// UnicodeScripts (not a regex: a cut where the script changes) before
// ByteLevel; its every code point is checked by test-tokenizer-scripts.sh.
write('unicode-scripts', null, [{ type: 'UnicodeScripts' }, bytelevel]);
// The Nmt normalizer (not a regex; its characters are few, and the test
// gives it every code point of the BMP).
write('nmt', { type: 'Nmt' }, [bytelevel]);
fs.rmSync(f);

// Random patterns over every construct above (seeded, so a failure can be
// replayed): rx-random-K, two random Splits each with a random behaviour.
let seed = Number(process.env.PRM_RX_SEED || 12345);
const rnd = (n) => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return Math.floor((seed / 2147483648) * n);
};
const pick = (a) => a[rnd(a.length)];
const CATS = ['L', 'Lu', 'Ll', 'Lt', 'Lm', 'Lo', 'M', 'Mn', 'Mc', 'Me', 'N', 'Nd', 'Nl', 'No', 'P',
  'Pc', 'Pd', 'Ps', 'Pe', 'Pi', 'Pf', 'Po', 'S', 'Sm', 'Sc', 'Sk', 'So', 'Z', 'Zs', 'Zl', 'Zp',
  'C', 'Cc', 'Cf', 'Co', 'Cn', 'Letter', 'Symbol', 'Other_Punctuation', 'Any'];
const LITS = ['a', 'e', 't', 'T', ' ', ',', '\\.', '\\-', '\\n', "'", '\\x{3001}', '\u00e9', '\u4e00',
  '0', '\\t', '\\(', '\\u00A0', '\u0301'];
function esc() {
  if (rnd(2)) return `\\${pick(['p', 'P'])}{${rnd(5) ? '' : '^'}${pick(CATS)}}`;
  return '\\' + pick(['s', 'S', 'd', 'D', 'w', 'W', 'h', 'H']);
}
function cls() {
  const r = rnd(10);
  if (r < 7) return esc();
  if (r < 8) return '.';
  const items = [];
  for (let k = 0, m = 1 + rnd(3); k < m; k++) {
    const q = rnd(4);
    items.push(q === 0 ? pick(['a-z', '0-9', '\u3040-\u30ff', '\\x{80}-\\x{2FF}', '!-/'])
      : q === 1 ? pick(LITS) : esc());
  }
  return `[${rnd(3) ? '' : '^'}${items.join('')}]`;
}
function quant() {
  const q = pick(['', '', '?', '*', '+', '{2}', '{1,3}', '{2,}', '{,2}']);
  return q + (q && q[0] !== '{' ? pick(['', '', '?', '+']) : q ? pick(['', '?']) : '');
}
function atom(d) {
  const r = rnd(12);
  if (d < 2 && r < 2) return `(?:${alt(d + 1)})`;
  if (d < 2 && r < 3) return `(${pick(['?=', '?!', '?>'])}${alt(d + 1)})`;
  if (r < 4) return `(?<${pick(['=', '!'])}${pick(['\\s', '\\p{L}', ',', '[0-9]'])})`;
  if (r < 5) return pick(['^', '$', '\\b', '\\B', '\\A', '\\z', '\\Z']);
  if (r < 6) return `(?i:${pick(['the', "'re", 'a', 'x|y', 'k'])})`;
  if (r < 8) return pick(LITS) + quant();
  return cls() + quant();
}
function seqp(d) {
  let s = '';
  for (let k = 0, m = 1 + rnd(3); k < m; k++) s += atom(d);
  return s;
}
function alt(d) {
  const parts = [seqp(d)];
  while (rnd(3) === 0 && parts.length < 4) parts.push(seqp(d));
  return parts.join('|');
}
const BEH = ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous'];
const nrand = Number(process.env.PRM_RX_RANDOM || 12);
for (let k = 0; k < nrand; k++) {
  const steps = [split(alt(0), pick(BEH), rnd(4) === 0), split(alt(0), pick(BEH), rnd(4) === 0), bytelevel];
  try {
    // Replace by a regex that can match nothing is refused (see hf_pipe.c):
    // a character is required after the random part.
    write(`rx-random-${k}`, rnd(3) ? null : { type: 'Replace', pattern: { Regex: `(?:${alt(0)})\\S` },
      content: pick(['', '_', ' ']) }, steps);
  } catch (e) {
    console.error(`rx-random-${k}: the reference refused it: ${e.message.slice(0, 200)}`);
  }
}
