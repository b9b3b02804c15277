// hf-precompiled.mjs - writes the tokenizer.json files with which
// tests/cli/test-tokenizer-precompiled.sh checks the Precompiled normalizer
// (src/data/charsmap.c, grapheme.c) against Hugging Face tokenizers, and the
// probe text. Both build their charsmap here (tests/tokenizer/charsmap.mjs);
// the model is a byte-level BPE without merges, so the ids are the bytes
// of the normalized text, piece by piece:
//   - precompiled: an NFKC-like map (every code point of a few ranges that
//     NFKC changes, to its NFKC form), multi-character keys (the NFD forms
//     of the precomposed Latin letters, to the letter; emoji sequences),
//     keys that map to nothing, and a key that is a prefix of another;
//   - gprobe: every lead byte of a multi-byte character maps to "#" and "a"
//     to "A", so each cluster of fewer than 6 bytes shows whether it was
//     replaced whole (one "#" or "A") or character by character; with
//     gprobe.txt ("a" c and c "a" for every code point c, one to a line) it
//     shows for every code point whether it joins the letter before it
//     (Extend, SpacingMark, ZWJ) or the one after it (Prepend), as the
//     reference's grapheme clusters have it.
//   node hf-precompiled.mjs NM OUTDIR [STEP]   STEP > 1: one block of 1024 code
//                                               points in STEP in the probe
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { charsmap, nfkcLike } from './charsmap.mjs';

const [nm, out, stepArg] = process.argv.slice(2);
if (!out) {
  console.error('usage: hf-precompiled.mjs NM OUTDIR [STEP]');
  process.exit(2);
}
const step = Number(stepArg || 1);
const require = createRequire(path.join(nm, 'x.js'));
const tk = require('tokenizers');
fs.mkdirSync(out, { recursive: true });

// GPT-2's byte alphabet: a vocabulary of the 256 bytes, no merges.
const vocab = {};
{
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    vocab[String.fromCodePoint(printable ? b : 256 + extra++)] = b;
  }
}
function write(name, map) {
  const j = { version: '1.0', truncation: null, padding: null, added_tokens: [],
    normalizer: { type: 'Precompiled', precompiled_charsmap: charsmap(map).toString('base64') },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { String: '\n' }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
    post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
      end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false,
      vocab, merges: [] } };
  const d = path.join(out, name);
  fs.mkdirSync(d, { recursive: true });
  fs.writeFileSync(path.join(d, 'tokenizer.json'), JSON.stringify(j));
  tk.Tokenizer.fromFile(path.join(d, 'tokenizer.json')); // the reference reads it back
  console.log(`${name}: ${map.size} keys`);
}

const cp = (c) => String.fromCodePoint(c);
write('precompiled', nfkcLike());

const probe = new Map([['a', 'A']]);
for (let b = 0xc2; b <= 0xf4; b++) probe.set(Buffer.from([b]), '#');
write('gprobe', probe);
const lines = [];
for (let c0 = 0; c0 < 0x110000; c0 += 1024) {
  if ((c0 / 1024) % step) continue;
  for (let c = c0; c < c0 + 1024; c++) {
    if (c >= 0xd800 && c <= 0xdfff) continue;
    lines.push('a' + cp(c), cp(c) + 'a');
  }
}
fs.writeFileSync(path.join(out, 'gprobe.txt'), lines.join('\n') + '\n');
