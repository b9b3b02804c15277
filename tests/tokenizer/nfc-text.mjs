// nfc-text.mjs - writes a test text for NFC normalizers from Unicode's own
// data: every mark with a combining class next to marks of other classes,
// in both orders, after a letter; every character with a canonical
// decomposition, as itself and decomposed (NFD), alone and after a letter.
// With compat, the characters with a compatibility decomposition too (as
// themselves, as their NFKD, and followed by a mark), for NFKC and NFKD.
//   node nfc-text.mjs /usr/share/unicode/UnicodeData.txt OUTPUT [compat]
import fs from 'node:fs';

const [ud, output, compat] = process.argv.slice(2);
const marks = [], decomposable = [], kdecomposable = [];
for (const line of fs.readFileSync(ud, 'utf8').split('\n')) {
  const f = line.split(';');
  if (f.length < 6) continue;
  const c = String.fromCodePoint(parseInt(f[0], 16));
  if (Number(f[3])) marks.push(c);
  if (f[5] && !f[5].startsWith('<')) decomposable.push(c);
  if (f[5] && f[5].startsWith('<')) kdecomposable.push(c);
}
// One mark of each of several classes: 220, 230, 214, 202, 1, 10, 9, 240.
const others = ['\u0316', '\u0301', '\u1DCE', '\u0327', '\u0334', '\u05B0', '\u094D', '\u0345'];
const out = [];
for (const m of marks) for (const r of others) out.push('a' + m + r, 'a' + r + m, 'e' + r + m + r);
for (const c of decomposable) out.push(c, c.normalize('NFD'), 'a' + c.normalize('NFD') + '\u0316');
if (compat === 'compat')
  for (const c of kdecomposable) out.push(c, c.normalize('NFKD'), c + '\u0301\u0316');
fs.writeFileSync(output, out.join('\n') + '\n');
console.log(`${out.length} lines`);
