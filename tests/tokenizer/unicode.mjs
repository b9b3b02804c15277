// unicode.mjs - writes a Unicode-heavy UTF-8 test text for
// tests/cli/test-tokenizer-ref.sh, with a fixed seed:
//  - sentences from the npm nlp-corpus (real text) with, mixed in at
//    random, the pieces below;
//  - adversarial documents: letters, marks and numbers of every script
//    (a sample of every 128-code-point block, Unicode 16.0 additions
//    included), combining marks stacked on letters, emoji sequences (ZWJ,
//    skin tones, flags, keycaps, variation selectors), zero-width and
//    format characters, every White_Space character and the near misses
//    (U+180E, U+200B, U+FEFF, U+001C-U+001F), contractions in every case
//    (including U+017F, which folds to s), long digit runs of several
//    scripts, CR/LF/slash runs, mixed-case words (o200k splits on case).
//   node unicode.mjs CORPUS_DIR OUTPUT [DOCS]
import fs from 'node:fs';
import path from 'node:path';

const [dir, output, docsArg] = process.argv.slice(2);
const docs = Number(docsArg || 20);
let seed = 12345;
const rand = (n) => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return Math.floor(seed / 65536) % n;
};
const pick = (a) => a[rand(a.length)];
const cp = (c) => String.fromCodePoint(c);

// Every White_Space character, and characters often mistaken for one.
const spaces = [0x9, 0xa, 0xb, 0xc, 0xd, 0x20, 0x85, 0xa0, 0x1680, 0x2000, 0x2001, 0x2002,
  0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a, 0x2028, 0x2029, 0x202f,
  0x205f, 0x3000].map(cp);
const nearSpaces = [0x180e, 0x200b, 0x200c, 0x200d, 0x2060, 0xfeff, 0x1c, 0x1d, 0x1e, 0x1f,
  0x0, 0x7f, 0xad, 0x61c, 0x200e, 0x200f, 0x202a, 0x202e, 0x2066, 0xe0001, 0xe0041].map(cp);
// A sample of every block: letters, marks and numbers of every script.
const assigned = /[^\p{Cn}\p{Cs}\p{Co}]/u;
const sample = [];
for (let b = 0; b < 0x110000; b += 128) {
  if (b >= 0xd800 && b < 0xe000) continue;
  const got = [];
  for (let c = b; c < b + 128 && got.length < 6; c += 1 + rand(40)) if (assigned.test(cp(c))) got.push(cp(c));
  sample.push(...got);
}
// Unicode 16.0 additions (Node's own tables may not know them yet).
for (const c of [0x1c89, 0x1c8a, 0xa7cb, 0xa7cc, 0xa7cd, 0xa7da, 0xa7db, 0xa7dc, 0x105c0,
  0x10d40, 0x10d4a, 0x10d4e, 0x10d50, 0x10d69, 0x10d70, 0x10ec2, 0x10efc, 0x11380, 0x113b8,
  0x116d0, 0x11bc0, 0x11bf0, 0x13460, 0x16100, 0x1611e, 0x16130, 0x16d40, 0x16d43, 0x16d70,
  0x18cff, 0x1ccf0, 0x1e5d0, 0x1e5ee, 0x1e5f1, 0x2ebf0, 0x897]) sample.push(cp(c));
const marks = [0x300, 0x301, 0x308, 0x323, 0x35c, 0x360, 0x489, 0x5b4, 0x64b, 0x93f, 0x94d,
  0xe31, 0x1ab0, 0x1dc0, 0x20d0, 0x20dd, 0xfe0f, 0xfe20, 0x1d165].map(cp);
const emoji = ['😀', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇫🇷', '🇯🇵', '❤️', '1️⃣', '#️⃣', '🧑🏿‍💻',
  '👁️‍🗨️', '🏴󠁧󠁢󠁳󠁣󠁴󠁿', '☺︎', '🫠', '🪿'];
const contractions = [];
for (const c of ['s', 't', 're', 've', 'm', 'll', 'd', 'ſ', 'x']) {
  for (let m = 0; m < (1 << c.length); m++) {
    const w = Array.from(c, (ch, i) => (m >> i & 1 ? ch.toUpperCase() : ch)).join('');
    contractions.push("'" + w, "’" + w);
  }
}
const digitSets = ['0123456789', '٠١٢٣٤٥٦٧٨٩', '۰۱۲۳۴۵۶۷۸۹', '०१२३४५६७८९', '０１２３４５６７８９',
  '𝟎𝟏𝟐𝟑𝟒', 'ⅠⅡⅢⅫↀ', '½¾⅓①②⑳', '𐄇𐄈𐄉', '〇一二'];
const digits = () => {
  const set = Array.from(pick(digitSets));
  let s = '';
  for (let k = 1 + rand(rand(4) ? 8 : 40); k > 0; k--) s += pick(set);
  return s;
};
const words = ['HTMLParser', 'iPhone', 'McDonald', 'ǅungla', 'ǈubljana', 'ABC', 'aBC', 'Abc',
  'ʰello', 'ˈstress', 'ÉCOLE', 'straße', 'STRASSE', 'İstanbul', 'ıi', 'ΣΊΣΥΦΟΣ', 'σίσυφος',
  'Ⓐⓑ', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', 'ﬁne', 'Ǆ', 'ꭰꮿ', 'ᏣᎳᎩ', '中文字符', 'かなカナ', '한국어', 'ไทย',
  'हिन्दी', 'العربية', 'עברית', 'ελληνικά', 'русский', 'ქართული', 'አማርኛ', 'ᠮᠣᠩᠭᠣᠯ',
  'e\u0301', 'n\u0303o', 'a\u0308\u0301', '\u0301\u0301', 'x/y', 'a//b', '//\n', '\\\\', '...',
  '—', '«»', '$1,000.50', 'C++', 'foo_bar', '\r\n', '\n\r', '\r\r\n\n', '\n\n\n', ' \n ',
  '\t\n', '\u3000\n', '\u2028\n', '\u0085\r',
  // Special tokens' text: ordinary text to tiktoken's encode_ordinary, added
  // tokens to Hugging Face.
  '<|endoftext|>', '<|begin_of_text|>', '<|eot_id|>', '<s>', '</s>', '<unk>', ' <s> ', '<|endof'];
// One adversarial piece.
function piece() {
  switch (rand(12)) {
    case 0: return pick(spaces).repeat(1 + rand(3));
    case 1: return pick(nearSpaces);
    case 2: { let s = ''; for (let k = 1 + rand(6); k > 0; k--) s += pick(sample); return s; }
    case 3: { let s = pick(sample); for (let k = rand(4); k > 0; k--) s += pick(marks); return s; }
    case 4: return pick(emoji);
    case 5: return pick(contractions);
    case 6: return digits();
    case 7: return pick(words);
    case 8: return pick(marks);
    case 9: return pick(words) + pick(contractions);
    case 10: return pick(['/', '\r', '\n', '\r\n', '/\n', '?!', '"', "'", '(', ')']).repeat(1 + rand(3));
    default: return pick(sample);
  }
}

const out = [];
for (let d = 0; d < docs; d++) {
  const file = path.join(dir, `doc-${d}.json`);
  if (!fs.existsSync(file)) break;
  const sentences = JSON.parse(fs.readFileSync(file, 'utf8'));
  for (const s of sentences.slice(0, 200)) {
    const ws = s.split(' ');
    for (let k = rand(4); k > 0; k--) ws.splice(rand(ws.length + 1), 0, piece());
    out.push(ws.join(rand(5) ? ' ' : pick(spaces)));
  }
}
// Adversarial documents: pieces joined by nothing, a space or any space.
for (let d = 0; d < 400; d++) {
  let s = '';
  for (let k = 5 + rand(60); k > 0; k--) {
    s += piece();
    const j = rand(4);
    s += j === 0 ? '' : j === 1 ? ' ' : j === 2 ? pick(spaces) : pick(spaces) + pick(spaces);
  }
  out.push(s);
}
// Every sampled character once, alone between spaces and glued together.
out.push(sample.join(' '), sample.join(''), spaces.join('x'), spaces.join(''), nearSpaces.join('a'));
fs.writeFileSync(output, out.join('\n') + '\n', 'utf8');
