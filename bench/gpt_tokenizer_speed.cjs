// gpt_tokenizer_speed.cjs - times the npm package gpt-tokenizer (r50k_base,
// GPT-2's encoding) on a text file, one document per line, the way
// `primus benchmark tokenizer --compare` times primus, and prints one JSON
// line: {"seconds": best of N runs, "bytes": ..., "tokens": ..., "mbps": ...}.
//   node bench/gpt_tokenizer_speed.cjs PACKAGE_DIR FILE [REPEAT]
'use strict';
const fs = require('fs');
const path = require('path');

const [pkg, file, repeatArg] = process.argv.slice(2);
if (!pkg || !file) {
  console.error('usage: gpt_tokenizer_speed.cjs PACKAGE_DIR FILE [REPEAT]');
  process.exit(2);
}
const { encode } = require(path.join(pkg, 'cjs/encoding/r50k_base.js'));
const buf = fs.readFileSync(file);
const lines = buf.toString('utf8').split('\n');
const repeat = Number(repeatArg || 3);
let best = Infinity;
let tokens = 0;
for (let r = 0; r < repeat; r++) {
  const t0 = process.hrtime.bigint();
  let n = 0;
  for (const line of lines) if (line.length) n += encode(line).length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  if (s < best) best = s;
  tokens = n;
}
console.log(JSON.stringify({ seconds: best, bytes: buf.length, tokens, mbps: buf.length / best / 1e6 }));
