// hf-general.mjs - writes the tokenizer.json files that check primus's
// general tokenizer.json path (src/data/hf_pipe.c) against Hugging Face
// tokenizers: models trained here by the Rust library's own trainers
// (WordPiece, WordLevel, Unigram, character-level BPE; BPE with affixes by a
// small trainer here) on a slice of the Brown text, then put into layouts that use every normalizer,
// pre-tokenizer, Split behaviour, added-token flag, decoder and
// post-processor primus implements. Also writes added.txt, text where the
// added tokens occur in every context their flags distinguish.
//   node hf-general.mjs NM TRAIN_TEXT GPT2_JSON OUTDIR
// GPT2_JSON is a byte-level tokenizer.json (tiktoken2hf.mjs's GPT-2 layout).
// Prints the names of the layouts written (OUTDIR/NAME/tokenizer.json).
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { charsmap, nfkcLike } from './charsmap.mjs';

const [nm, trainText, gpt2Json, out] = process.argv.slice(2);
if (!out) {
  console.error('usage: hf-general.mjs NM TRAIN_TEXT GPT2_JSON OUTDIR');
  process.exit(2);
}
const require = createRequire(path.join(nm, 'x.js'));
const tk = require('tokenizers');
fs.mkdirSync(out, { recursive: true });

// Trains a model of class M with pre-tokenizer pre and returns its JSON.
function train(M, pre) {
  const t = new tk.Tokenizer(M.empty());
  t.setPreTokenizer(pre);
  t.train([trainText]);
  const f = path.join(out, 'trained.json');
  t.save(f);
  return JSON.parse(fs.readFileSync(f, 'utf8'));
}

const META = '\u2581';
const added = (id, content, o = {}) => ({ id, content, single_word: false, lstrip: false,
  rstrip: false, normalized: !o.special, special: false, ...o });
const split = (pattern, behavior, invert = false, regex = false) => ({ type: 'Split',
  pattern: regex ? { Regex: pattern } : { String: pattern }, behavior, invert });
const seq = (type, key, list) => ({ type: 'Sequence', [key]: list });
const CL100K = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Adds tokens to a model's vocabulary object (ids after the largest).
function extend(vocab, tokens) {
  let next = Math.max(...Object.values(vocab)) + 1;
  const ids = {};
  for (const t of tokens) {
    if (!(t in vocab)) vocab[t] = next++;
    ids[t] = vocab[t];
  }
  return ids;
}

const layouts = {};
function write(name, j) {
  const d = path.join(out, name);
  fs.mkdirSync(d, { recursive: true });
  fs.writeFileSync(path.join(d, 'tokenizer.json'), JSON.stringify(j));
  // The reference must read it back as written.
  tk.Tokenizer.fromFile(path.join(d, 'tokenizer.json'));
  layouts[name] = 1;
}
const base = (model) => ({ version: '1.0', truncation: null, padding: null, added_tokens: [],
  normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null, model });

// WordPiece, BERT-like: NFD, Lowercase, Strip; WhitespaceSplit, Punctuation,
// individual digits; [CLS] $A [SEP]; a [MASK] that takes the spaces before it.
{
  const j = train(tk.WordPiece, tk.whitespacePreTokenizer());
  const ids = extend(j.model.vocab, ['[UNK]', '[CLS]', '[SEP]', '[MASK]']);
  const t = base(j.model);
  t.added_tokens = [added(ids['[UNK]'], '[UNK]', { special: true }),
    added(ids['[CLS]'], '[CLS]', { special: true }), added(ids['[SEP]'], '[SEP]', { special: true }),
    added(ids['[MASK]'], '[MASK]', { special: true, lstrip: true })];
  t.normalizer = seq('Sequence', 'normalizers', [{ type: 'NFD' }, { type: 'Lowercase' },
    { type: 'Strip', strip_left: true, strip_right: true }]);
  t.pre_tokenizer = seq('Sequence', 'pretokenizers', [{ type: 'WhitespaceSplit' },
    { type: 'Punctuation', behavior: 'Isolated' }, { type: 'Digits', individual_digits: true }]);
  t.decoder = { type: 'WordPiece', prefix: '##', cleanup: true };
  t.post_processor = { type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
      { SpecialToken: { id: '[SEP]', type_id: 0 } }],
    pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
    special_tokens: { '[CLS]': { id: '[CLS]', ids: [ids['[CLS]']], tokens: ['[CLS]'] },
      '[SEP]': { id: '[SEP]', ids: [ids['[SEP]']], tokens: ['[SEP]'] } } };
  write('wordpiece-bert', t);

  // The same vocabulary: Whitespace, short words only, added tokens with
  // single_word (normalized) and rstrip (not normalized), no decoder.
  const w = base({ ...j.model, max_input_chars_per_word: 12 });
  const more = extend(w.model.vocab, ['hello', '<sep>', 'The']);
  w.added_tokens = [added(ids['[UNK]'], '[UNK]', { special: true }),
    added(more.hello, 'hello', { single_word: true }),
    added(more['<sep>'], '<sep>', { rstrip: true, normalized: false }),
    added(more.The, 'The', { single_word: true, lstrip: true, rstrip: true })];
  w.pre_tokenizer = { type: 'Whitespace' };
  w.post_processor = { type: 'BertProcessing', sep: ['[SEP]', ids['[SEP]']],
    cls: ['[CLS]', ids['[CLS]']] };
  write('wordpiece-ws', w);
}

// WordLevel: Replace and Prepend normalizers, Split by strings with every
// behaviour, CharDelimiterSplit, WhitespaceSplit.
{
  const j = train(tk.WordLevel, tk.whitespaceSplitPreTokenizer());
  extend(j.model.vocab, ['<unk>']);
  j.model.unk_token = '<unk>';
  const t = base(j.model);
  t.normalizer = seq('Sequence', 'normalizers', [{ type: 'Replace', pattern: { String: '``' },
    content: '"' }, { type: 'Prepend', prepend: ' ' }]);
  t.pre_tokenizer = seq('Sequence', 'pretokenizers', [split('--', 'MergedWithNext'),
    split(',', 'MergedWithPrevious'), split('.', 'Isolated'), split('; ', 'Removed'),
    { type: 'CharDelimiterSplit', delimiter: '\n' }, { type: 'WhitespaceSplit' }]);
  write('wordlevel', t);
  const c = base(j.model);
  c.pre_tokenizer = seq('Sequence', 'pretokenizers', [split(' ', 'Contiguous'),
    split('e', 'Removed', true), split('a', 'MergedWithNext', true),
    split('o', 'MergedWithPrevious', true), split(' ', 'Isolated', true)]);
  c.normalizer = { type: 'Strip', strip_left: false, strip_right: true };
  write('wordlevel-invert', c);
}

// Unigram with byte fallback under Metaspace; and without, under Digits,
// Punctuation and Metaspace without split, lowercased.
{
  const j = train(tk.Unigram, tk.metaspacePreTokenizer());
  const m = j.model;
  const min = Math.min(...m.vocab.map((v) => v[1]));
  m.vocab.push(['<unk>', 0]);
  m.unk_id = m.vocab.length - 1;
  const plain = JSON.parse(JSON.stringify(m));
  for (let b = 0; b < 256; b++)
    m.vocab.push([`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`, min - 1 - b / 256]);
  m.byte_fallback = true;
  const t = base(m);
  t.added_tokens = [added(m.unk_id, '<unk>', { special: true })];
  t.normalizer = { type: 'NFC' };
  t.pre_tokenizer = { type: 'Metaspace', replacement: META, prepend_scheme: 'first', split: true };
  t.decoder = seq('Sequence', 'decoders', [{ type: 'Replace', pattern: { String: META },
    content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' },
    { type: 'Strip', content: ' ', start: 1, stop: 0 }]);
  t.post_processor = seq('Sequence', 'processors', [{ type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
    { type: 'RobertaProcessing', sep: ['<unk>', m.unk_id], cls: ['<unk>', m.unk_id],
      trim_offsets: true, add_prefix_space: false }]);
  write('unigram-bytefallback', t);
  const u = base(plain);
  u.normalizer = seq('Sequence', 'normalizers', [{ type: 'Lowercase' }, { type: 'NFD' }]);
  u.pre_tokenizer = seq('Sequence', 'pretokenizers', [{ type: 'Digits', individual_digits: false },
    { type: 'Punctuation', behavior: 'MergedWithPrevious' },
    { type: 'Metaspace', replacement: META, prepend_scheme: 'always', split: false }]);
  u.decoder = { type: 'Metaspace', replacement: META, prepend_scheme: 'always', split: false };
  write('unigram-digits', u);
  // T5's layout: SentencePiece's charsmap (an NFKC-like one built here,
  // tests/tokenizer/charsmap.mjs), runs of spaces made one, WhitespaceSplit
  // and Metaspace.
  const t5 = base(JSON.parse(JSON.stringify(plain)));
  t5.normalizer = seq('Sequence', 'normalizers', [
    { type: 'Precompiled', precompiled_charsmap: charsmap(nfkcLike()).toString('base64') },
    { type: 'Replace', pattern: { Regex: ' {2,}' }, content: ' ' }]);
  t5.pre_tokenizer = seq('Sequence', 'pretokenizers', [{ type: 'WhitespaceSplit' },
    { type: 'Metaspace', replacement: META, prepend_scheme: 'always', split: true }]);
  t5.decoder = { type: 'Metaspace', replacement: META, prepend_scheme: 'always', split: true };
  write('unigram-t5', t5);
}

// Character-level BPE with an unknown token (fused), under a known regex
// Split inverted and Punctuation Contiguous.
{
  const j = train(tk.BPE, tk.whitespacePreTokenizer());
  extend(j.model.vocab, ['[UNK]']);
  j.model.unk_token = '[UNK]';
  j.model.fuse_unk = true;
  const t = base(j.model);
  t.pre_tokenizer = seq('Sequence', 'pretokenizers', [split(CL100K, 'Removed', true, true),
    { type: 'Punctuation', behavior: 'Contiguous' }, split(' ', 'Removed')]);
  t.decoder = { type: 'BPEDecoder', suffix: '</w>' };
  write('bpe-charlevel', t);
}

// Byte-level BPE (GPT-2's vocabulary) behind Lowercase, Digits and a
// Whitespace pre-tokenizer, then ByteLevel without its regex.
{
  const g = JSON.parse(fs.readFileSync(gpt2Json, 'utf8'));
  g.normalizer = { type: 'Lowercase' };
  g.pre_tokenizer = seq('Sequence', 'pretokenizers', [{ type: 'Digits', individual_digits: true },
    { type: 'Whitespace' }, { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true,
      use_regex: false }]);
  g.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
  write('gpt2-lower', g);
}

// BERT's own layout: BertNormalizer (clean_text, handle_chinese_chars,
// strip_accents following lowercase), BertPreTokenizer, WordPiece, [CLS] $A
// [SEP]; and a cased variant behind NFKC with BertNormalizer's flags the
// other way, decoded by CTC.
{
  const j = train(tk.WordPiece, tk.bertPreTokenizer());
  const ids = extend(j.model.vocab, ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', '|']);
  const t = base(j.model);
  t.added_tokens = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'].map((w) =>
    added(ids[w], w, { special: true, normalized: false }));
  t.normalizer = { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true,
    strip_accents: null, lowercase: true };
  t.pre_tokenizer = { type: 'BertPreTokenizer' };
  t.decoder = { type: 'WordPiece', prefix: '##', cleanup: true };
  t.post_processor = { type: 'BertProcessing', sep: ['[SEP]', ids['[SEP]']],
    cls: ['[CLS]', ids['[CLS]']] };
  write('bert', t);
  const c = base(j.model);
  c.added_tokens = t.added_tokens;
  c.normalizer = seq('Sequence', 'normalizers', [{ type: 'NFKC' }, { type: 'BertNormalizer',
    clean_text: false, handle_chinese_chars: false, strip_accents: true, lowercase: false }]);
  c.pre_tokenizer = seq('Sequence', 'pretokenizers', [{ type: 'BertPreTokenizer' }]);
  c.decoder = { type: 'CTC', pad_token: '[PAD]', word_delimiter_token: '|', cleanup: true };
  write('bert-nfkc-ctc', c);
}

// WordLevel behind NFKD, StripAccents and Lowercase; CTC without cleanup.
{
  const j = train(tk.WordLevel, tk.whitespaceSplitPreTokenizer());
  extend(j.model.vocab, ['<unk>']);
  j.model.unk_token = '<unk>';
  const t = base(j.model);
  t.normalizer = seq('Sequence', 'normalizers', [{ type: 'NFKD' }, { type: 'StripAccents' },
    { type: 'Lowercase' }]);
  t.pre_tokenizer = { type: 'BertPreTokenizer' };
  t.decoder = { type: 'CTC', pad_token: '<unk>', word_delimiter_token: 'the', cleanup: false };
  write('wordlevel-nfkd', t);
}

// Character-level BPE with a continuing_subword_prefix and an
// end_of_word_suffix (which Hugging Face's trainer here cannot be asked
// for): merges learnt by a small trainer below on BertPreTokenizer's words,
// every byte-fallback token, the rest unknown.
{
  const P = '##', S = '</w>';
  const words = new Map();
  const text = fs.readFileSync(trainText, 'utf8').slice(0, 100000);
  for (const [w] of tk.bertPreTokenizer().preTokenizeString(text))
    words.set(w, (words.get(w) || 0) + 1);
  const vocab = {};
  const tok = (x) => { if (!(x in vocab)) vocab[x] = Object.keys(vocab).length; return x; };
  tok('<unk>');
  for (let b = 0; b < 256; b++) tok(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
  const seqs = [];
  for (const [w, n] of words) {
    const ch = [...w];
    seqs.push([ch.map((c, i) => tok((i ? P : '') + c + (i === ch.length - 1 ? S : ''))), n]);
  }
  const merges = [];
  for (let r = 0; r < 600; r++) {
    const count = new Map();
    for (const [sq, n] of seqs)
      for (let i = 0; i + 1 < sq.length; i++) {
        const k = sq[i] + ' ' + sq[i + 1];
        count.set(k, (count.get(k) || 0) + n);
      }
    let best = null, bn = 0;
    for (const [k, n] of count) if (n > bn) { best = k; bn = n; }
    if (!best) break;
    const [a, b] = best.split(' ');
    const m = tok(a + b.slice(P.length));
    merges.push([a, b]);
    for (const e of seqs) {
      const sq = e[0], o = [];
      for (let i = 0; i < sq.length; i++) {
        if (i + 1 < sq.length && sq[i] === a && sq[i + 1] === b) { o.push(m); i++; }
        else o.push(sq[i]);
      }
      e[0] = o;
    }
  }
  const t = base({ type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: P,
    end_of_word_suffix: S, fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab,
    merges });
  t.pre_tokenizer = { type: 'BertPreTokenizer' };
  t.decoder = { type: 'BPEDecoder', suffix: S };
  write('bpe-affixes', t);
  // The same model shows every byte the normalizers write (what it lacks
  // becomes byte-fallback tokens): NFKC; NFKD then StripAccents;
  // BertNormalizer with every step; each line a piece.
  const lines = split('\n', 'Isolated');
  for (const [name, norm] of [['nfkc', { type: 'NFKC' }],
    ['nfkd-strip', seq('Sequence', 'normalizers', [{ type: 'NFKD' }, { type: 'StripAccents' }])],
    ['bertnorm', { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true,
      strip_accents: null, lowercase: true }]]) {
    const u = base(t.model);
    u.normalizer = norm;
    u.pre_tokenizer = lines;
    u.decoder = seq('Sequence', 'decoders', [{ type: 'ByteFallback' }, { type: 'Fuse' }]);
    write('bpe-' + name, u);
  }
}

// Text where the added tokens meet every neighbour their flags look at.
const words = ['hello', 'Hello', 'HELLO', 'hello_', '_hello', 'ahello', 'hello2', 'héllo',
  '[MASK]', '<sep>', 'The', 'the', 'Theory', '[CLS]', '[UNK]', '<unk>'];
const seps = ['', ' ', '  ', '\t', '\n', '\u00a0', '\u3000', ',', '-', 'x', 'é', '_', '1', '\u2581'];
let text = '';
for (const w of words)
  for (const a of seps) for (const b of seps) text += `${a}${w}${b}|`;
fs.writeFileSync(path.join(out, 'added.txt'), text + '\n');
fs.rmSync(path.join(out, 'trained.json'));
console.log(Object.keys(layouts).join('\n'));
