// ugc.mjs - dumps the general categories as Hugging Face tokenizers'
// Oniguruma has them: for each two-letter category Xx, the code points
// \p{Xx} matches, one decimal code point a line, in DIR/Xx.txt, and those
// of its \w in DIR/word.txt (for gen-unicode-gc.py). Surrogates are not
// asked.
//   node ugc.mjs NM DIR
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const [nm, dir] = process.argv.slice(2);
const require = createRequire(path.join(nm, 'x.js'));
const { Tokenizer } = require('tokenizers');
const CATS = ['Lu', 'Ll', 'Lt', 'Lm', 'Lo', 'Mn', 'Mc', 'Me', 'Nd', 'Nl', 'No', 'Pc', 'Pd',
  'Ps', 'Pe', 'Pi', 'Pf', 'Po', 'Sm', 'Sc', 'Sk', 'So', 'Zs', 'Zl', 'Zp', 'Cc', 'Cf', 'Co', 'word'];
const cps = [];
for (let c = 0; c < 0x110000; c++) if (c < 0xd800 || c > 0xdfff) cps.push(c);
const chunks = [];
for (let i = 0; i < cps.length; i += 4096) chunks.push(String.fromCodePoint(...cps.slice(i, i + 4096)));
// A byte-level vocabulary without merges: the ids are the matched bytes.
const b2u = [];
let extra = 0;
for (let b = 0; b < 256; b++) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  b2u[b] = String.fromCodePoint(printable ? b : 256 + extra++);
}
const vocab = {};
for (let b = 0; b < 256; b++) vocab[b2u[b]] = b;
const tmp = fs.mkdtempSync(path.join(process.env.TMPDIR || '/tmp', 'ugc-'));
fs.mkdirSync(dir, { recursive: true });
for (const cat of CATS) {
  const j = { version: '1.0', added_tokens: [], normalizer: null, post_processor: null,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: cat === 'word' ? '\\w' : `\\p{${cat}}` }, behavior: 'Removed', invert: true },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false }] },
    decoder: null,
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab, merges: [] } };
  const f = path.join(tmp, 'gc.json');
  fs.writeFileSync(f, JSON.stringify(j));
  const t = Tokenizer.fromFile(f);
  const got = [];
  for (const s of chunks) {
    const ids = (await t.encode(s, null, { addSpecialTokens: false })).getIds();
    for (const ch of Buffer.from(ids).toString('utf8')) got.push(ch.codePointAt(0));
  }
  fs.writeFileSync(path.join(dir, cat + '.txt'), got.join('\n') + '\n');
}
fs.rmSync(tmp, { recursive: true });
