// uprops.mjs - dumps what Hugging Face tokenizers (0.23.2, its Node
// bindings) does with every code point, for gen-unicode-ext.py's REF_DIR:
// word.txt, the code points its Whitespace pre-tokenizer counts as \w;
// punct.txt, those its Punctuation pre-tokenizer splits off; lower.txt, each
// code point its Lowercase normalizer changes, then what it becomes.
//   node uprops.mjs NM OUTDIR      (about a minute: one call per code point)
import { createRequire } from 'node:module';
import path from 'node:path';
import fs from 'node:fs';
const require = createRequire(path.join(process.argv[2], 'x.js'));
const out = process.argv[3];
fs.mkdirSync(out, { recursive: true });
const tk = require('tokenizers');
const ws = tk.whitespacePreTokenizer(), pu = tk.punctuationPreTokenizer('removed'), lo = tk.lowercase();
const W = [], P = [], L = [];
for (let c = 0; c < 0x110000; c++) {
  if (c >= 0xd800 && c <= 0xdfff) continue;
  const s = String.fromCodePoint(c);
  const a = ws.preTokenizeString('a' + s);
  if (a.length === 1 && a[0][0] === 'a' + s) W.push(c);
  if (pu.preTokenizeString(s).length === 0) P.push(c);
  const x = lo.normalizeString(s);
  if (x !== s) L.push(c + ' ' + [...x].map((ch) => ch.codePointAt(0)).join(' '));
}
fs.writeFileSync(path.join(out, 'word.txt'), W.join('\n') + '\n');
fs.writeFileSync(path.join(out, 'punct.txt'), P.join('\n') + '\n');
fs.writeFileSync(path.join(out, 'lower.txt'), L.join('\n') + '\n');
