// charsmap.mjs - builds a SentencePiece precompiled charsmap (the
// "precompiled_charsmap" of a Precompiled normalizer) from a map of keys to
// replacements, as no real one can be downloaded here: a little-endian u32
// with the trie's size in bytes, the trie (a darts-clone double array of
// u32 units), then the replacements, each ending in a NUL byte. A unit
// holds a label (bits 0-7), a has-leaf flag (bit 8) and the XOR offset of
// its children (bits 10-31, shifted left 8 more when bit 9 is set); a value
// unit (bit 31 set) holds a replacement's offset. A node's children sit at
// base ^ byte, its value at base ^ 0; bases are packed first fit.
//   import { charsmap } from './charsmap.mjs'; charsmap(new Map([[key, value]...]))
// returns a Buffer. A key may be a Buffer (bytes that are not UTF-8: a
// lead byte alone matches every character it starts).
export function charsmap(map) {
  // The trie of the keys' bytes.
  const root = { kids: new Map(), value: -1 };
  const norm = [];
  let normLen = 0;
  const offsets = new Map();
  for (const [k, v] of map) {
    const kb = Buffer.isBuffer(k) ? k : Buffer.from(k, 'utf8');
    if (!kb.length || kb.includes(0)) throw new Error(`charsmap: bad key ${JSON.stringify(k)}`);
    if (!offsets.has(v)) {
      const vb = Buffer.from(v + '\0', 'utf8');
      offsets.set(v, normLen);
      norm.push(vb);
      normLen += vb.length;
    }
    let n = root;
    for (const b of kb) {
      if (!n.kids.has(b)) n.kids.set(b, { kids: new Map(), value: -1 });
      n = n.kids.get(b);
    }
    n.value = offsets.get(v);
  }
  const units = [];
  const used = [];
  const grow = (n) => { while (units.length < n) { units.push(0); used.push(false); } };
  grow(256);
  used[0] = true;
  // A base for a node whose needed labels are need: first fit.
  const place = (need) => {
    for (let b = 0; ; b++) {
      grow((b | 255) + 1);
      if (need.every((c) => !used[b ^ c])) {
        for (const c of need) used[b ^ c] = true;
        return b;
      }
    }
  };
  const enc = (off, label, leaf) => {
    if (off >= 1 << 21) throw new Error('charsmap: offset too large');
    return ((off << 10) | (leaf ? 1 << 8 : 0) | label) >>> 0;
  };
  // Breadth first: each node with children or a value gets a base.
  const queue = [[root, 0, 0]];
  while (queue.length) {
    const [n, pos, label] = queue.shift();
    const need = [...n.kids.keys()];
    if (n.value >= 0) need.push(0);
    if (!need.length) continue;
    const b = place(need);
    units[pos] = enc(pos ^ b, label, n.value >= 0);
    if (n.value >= 0) units[b] = (0x80000000 | n.value) >>> 0;
    for (const [c, kid] of n.kids) {
      units[b ^ c] = c; // its own offset is set when it is placed
      queue.push([kid, b ^ c, c]);
    }
  }
  const trie = Buffer.alloc(units.length * 4);
  units.forEach((u, i) => trie.writeUInt32LE(u >>> 0, i * 4));
  const head = Buffer.alloc(4);
  head.writeUInt32LE(trie.length, 0);
  return Buffer.concat([head, trie, ...norm]);
}

// The NFKC-like map of the tests: every code point of a few ranges that
// NFKC changes, to its NFKC form; multi-character keys (the NFD forms of
// the precomposed Latin letters, to the letter in <>; emoji sequences; a
// Hangul and a Devanagari pair); keys that map to nothing; "q" and "qu"
// (the longer never wins: the shorter is a prefix of it).
export function nfkcLike() {
  const cp = (c) => String.fromCodePoint(c);
  const m = new Map();
  for (const [lo, hi] of [[0xa0, 0x2fff], [0x3000, 0x33ff], [0xf900, 0xfaff], [0xfb00, 0xfb4f],
    [0xfe30, 0xfe6f], [0xff00, 0xffef], [0x1d400, 0x1d4ff], [0x1f100, 0x1f1ff]]) {
    for (let c = lo; c <= hi; c++) {
      if (c >= 0xd800 && c <= 0xdfff) continue;
      const k = cp(c), v = k.normalize('NFKC');
      if (v !== k) m.set(k, v);
    }
  }
  for (let c = 0xc0; c <= 0x17f; c++) {
    const d = cp(c).normalize('NFD');
    if (d.length > 1) m.set(d, `<${cp(c)}>`);
  }
  m.set('\u200b', '');
  m.set('\u00ad', '');
  m.set('\u0301', '\u00b4');
  m.set('\ud83d\udc4d', '(y)');
  m.set('\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67', '<family>');
  m.set('\ud83c\uddfa\ud83c\uddf8', '<US>');
  m.set('1\ufe0f\u20e3', '[1]');
  m.set('q', 'Q');
  m.set('qu', 'KW');
  m.set('\u1100\u1161', '<GA>');
  m.set('\u0915\u094d', '<K.>');
  return m;
}
