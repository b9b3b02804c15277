// uprops.mjs - dumps what Hugging Face tokenizers (0.23.2, its Node
// bindings) does with every code point, for gen-unicode-ext.py's REF_DIR:
// word.txt, the code points its Whitespace pre-tokenizer counts as \w;
// punct.txt, those its Punctuation pre-tokenizer splits off; lower.txt, each
// code point its Lowercase normalizer changes, then what it becomes;
// nfkd.txt, each code point its NFKD normalizer changes, then what it
// becomes; combining.txt, those its StripAccents normalizer removes;
// bert-ctl.txt and bert-ws.txt, those BertNormalizer's clean_text removes
// and turns into a space; bert-cjk.txt, those its handle_chinese_chars puts
// spaces around; mn.txt, the code points that NFD leaves alone and its
// strip_accents removes.
//   node uprops.mjs NM OUTDIR      (a few minutes: calls per code point)
import { createRequire } from 'node:module';
import path from 'node:path';
import fs from 'node:fs';
const require = createRequire(path.join(process.argv[2], 'x.js'));
const out = process.argv[3];
fs.mkdirSync(out, { recursive: true });
const tk = require('tokenizers');
const ws = tk.whitespacePreTokenizer(), pu = tk.punctuationPreTokenizer('removed'), lo = tk.lowercase();
const nfkd = tk.nfkdNormalizer(), nfd = tk.nfdNormalizer(), sa = tk.stripAccentsNormalizer();
const bert = (o) => tk.bertNormalizer({ cleanText: false, handleChineseChars: false,
  stripAccents: false, lowercase: false, ...o });
const bclean = bert({ cleanText: true }), bcjk = bert({ handleChineseChars: true });
const bstrip = bert({ stripAccents: true });
const W = [], P = [], L = [], K = [], C = [], BC = [], BW = [], BJ = [], MN = [];
for (let c = 0; c < 0x110000; c++) {
  if (c >= 0xd800 && c <= 0xdfff) continue;
  const s = String.fromCodePoint(c);
  const a = ws.preTokenizeString('a' + s);
  if (a.length === 1 && a[0][0] === 'a' + s) W.push(c);
  if (pu.preTokenizeString(s).length === 0) P.push(c);
  const x = lo.normalizeString(s);
  if (x !== s) L.push(c + ' ' + [...x].map((ch) => ch.codePointAt(0)).join(' '));
  const k = nfkd.normalizeString(s);
  if (k !== s) K.push(c + ' ' + [...k].map((ch) => ch.codePointAt(0)).join(' '));
  if (sa.normalizeString(s) === '') C.push(c);
  const cl = bclean.normalizeString(s);
  if (cl === '') BC.push(c);
  else if (cl === ' ' && s !== ' ') BW.push(c);
  if (bcjk.normalizeString(s) !== s) BJ.push(c);
  if (nfd.normalizeString(s) === s && bstrip.normalizeString(s) === '') MN.push(c);
}
fs.writeFileSync(path.join(out, 'word.txt'), W.join('\n') + '\n');
fs.writeFileSync(path.join(out, 'punct.txt'), P.join('\n') + '\n');
fs.writeFileSync(path.join(out, 'lower.txt'), L.join('\n') + '\n');
for (const [f, v] of [['nfkd', K], ['combining', C], ['bert-ctl', BC], ['bert-ws', BW],
  ['bert-cjk', BJ], ['mn', MN]])
  fs.writeFileSync(path.join(out, f + '.txt'), v.join('\n') + '\n');
