// unicode.mjs - writes a Unicode-heavy UTF-8 test text for
// tests/cli/test-tokenizer-ref.sh: sentences from the npm nlp-corpus with,
// mixed in at random (fixed seed), emoji (with ZWJ and skin tones), CJK,
// Arabic, Devanagari, combining marks, non-ASCII digits and every kind of
// space the pre-tokenizer treats specially (NBSP, U+3000, U+FEFF, U+0085,
// U+180E, U+2028), plus contractions and runs of spaces and newlines.
//   node unicode.mjs CORPUS_DIR OUTPUT [DOCS]
import fs from 'node:fs';
import path from 'node:path';

const [dir, output, docsArg] = process.argv.slice(2);
const docs = Number(docsArg || 20);
let seed = 12345;
const rand = (n) => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed % n;
};
const extras = [
  '😀', '👍🏽', '👨‍👩‍👧‍👦', '🇫🇷', '❤️', '中文字符', '日本語のテキスト', '한국어', 'Ελληνικά',
  'русский текст', 'العربية', 'हिन्दी', 'e\u0301', 'n\u0303o', 'a\u0308\u0301', '١٢٣', '४२',
  '\u00a0', '\u3000', '\ufeff', '\u0085', '\u180e', '\u2028', '\u2003', '\t', '  ', '   ', '\n',
  '\n\n', '\r\n', "'s", "'ll", "'RE", "’s", '...', '—', '«»', '$1,000.50', '½', 'ﬁ', 'İı',
  'ß', 'Ⅻ', '①', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', '\u200d', '\u200b', 'x\u0000y', '\u001b[0m',
];
const out = [];
for (let d = 0; d < docs; d++) {
  const file = path.join(dir, `doc-${d}.json`);
  if (!fs.existsSync(file)) break;
  const sentences = JSON.parse(fs.readFileSync(file, 'utf8'));
  for (const s of sentences.slice(0, 200)) {
    const words = s.split(' ');
    for (let k = rand(4); k > 0; k--) words.splice(rand(words.length + 1), 0, extras[rand(extras.length)]);
    out.push(words.join(rand(5) ? ' ' : extras[rand(extras.length)]));
  }
}
fs.writeFileSync(output, out.join('\n') + '\n', 'utf8');
