// ref.mjs - the reference side of tests/cli/test-tokenizer-ref.sh: encodes a
// UTF-8 file with the npm package gpt-tokenizer (r50k_base, GPT-2's
// encoding) and writes the ids as little-endian int32.
//   node ref.mjs PACKAGE_DIR INPUT OUTPUT          whole file, one encode
//   node ref.mjs PACKAGE_DIR INPUT --bench [N]     MB/s, one encode per line
//   node ref.mjs --compare A.bin B.bin             ids compared, mismatches
// Special-token text is encoded as ordinary text, as primus does.
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [pkg, input, output, reps] = process.argv.slice(2);
if (pkg === '--compare') {
  const ids = (f) => { const b = fs.readFileSync(f); return new Int32Array(b.buffer, b.byteOffset, b.length / 4); };
  const a = ids(input), b = ids(output);
  let first = -1, bad = 0;
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) { bad++; if (first < 0) first = i; }
  console.log(`${a.length} ids vs ${b.length}, ${bad} mismatches` +
              (first >= 0 ? ` (first at ${first}: ${a.slice(first, first + 5)} vs ${b.slice(first, first + 5)})` : ''));
  process.exit(bad ? 1 : 0);
}
if (!pkg || !input || !output) {
  console.error('usage: ref.mjs PACKAGE_DIR INPUT OUTPUT|--bench [N]');
  process.exit(2);
}
const mod = await import(pathToFileURL(path.join(pkg, 'esm/encoding/r50k_base.js')).href);
const opts = { disallowedSpecial: new Set() };
const buf = fs.readFileSync(input);
const text = buf.toString('utf8');
if (output === '--bench') {
  const lines = text.split('\n');
  let best = Infinity, tokens = 0;
  for (let r = 0; r < Number(reps || 3); r++) {
    const t0 = process.hrtime.bigint();
    let n = 0;
    for (const line of lines) if (line.length) n += mod.encode(line, opts).length;
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    if (s < best) best = s;
    tokens = n;
  }
  console.log(`gpt-tokenizer: ${buf.length} bytes, ${tokens} tokens, ${best.toFixed(3)} s, ` +
              `${(buf.length / best / 1e6).toFixed(2)} MB/s`);
} else {
  const ids = mod.encode(text, opts);
  const out = new Int32Array(ids);
  fs.writeFileSync(output, Buffer.from(out.buffer));
  console.log(`${ids.length} ids`);
}
