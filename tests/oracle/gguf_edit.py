#!/usr/bin/env python3
"""gguf_edit.py IN OUT [--del KEY]... [--set KEY=TYPE:VALUE]...

Rewrites a GGUF v3 file's key/value section (the tests' way to make files
primus' exporter would not write: other rope.scaling keys, a missing key)
and copies the tensor infos and data unchanged. TYPE is u32, f32 or str;
a --set of an existing key replaces it in place, a new one is appended.
Standard library only.
"""
import struct, sys

# GGUF value types: fixed-size scalars by struct format; 8 string, 9 array.
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class Reader:
    def __init__(self, buf):
        self.b, self.p = buf, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.b, self.p)
        self.p += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = self.b[self.p:self.p + n]
        self.p += n
        return s

    def value(self, t):  # skips a value of type t, returning its raw bytes
        start = self.p
        if t in SCALAR:
            self.take(SCALAR[t])
        elif t == 8:
            self.string()
        elif t == 9:
            at, n = self.take("I"), self.take("Q")
            for _ in range(n):
                self.value(at)
        else:
            sys.exit("gguf_edit: unknown value type %d" % t)
        return self.b[start:self.p]


def encode(spec):
    key, _, tv = spec.partition("=")
    typ, _, val = tv.partition(":")
    if typ == "u32":
        return key, struct.pack("<I", 4) + struct.pack("<I", int(val))
    if typ == "f32":
        return key, struct.pack("<I", 6) + struct.pack("<f", float(val))
    if typ == "str":
        v = val.encode()
        return key, struct.pack("<I", 8) + struct.pack("<Q", len(v)) + v
    sys.exit("gguf_edit: --set %s: TYPE must be u32, f32 or str" % spec)


def main():
    a = sys.argv[1:]
    if len(a) < 2:
        sys.exit(__doc__)
    src, dst, ops = a[0], a[1], a[2:]
    buf = open(src, "rb").read()
    r = Reader(buf)
    if r.take("I") != 0x46554747 or r.take("I") != 3:
        sys.exit("gguf_edit: %s is not a GGUF v3 file" % src)
    nt, nkv = r.take("Q"), r.take("Q")
    kvs, align = [], 32
    for _ in range(nkv):
        k = r.string().decode()
        t = r.take("I")
        raw = r.value(t)
        if k == "general.alignment":
            align = struct.unpack("<I", raw)[0]
        kvs.append([k, struct.pack("<I", t) + raw])
    infos = r.p
    for _ in range(nt):  # name, ndim, ne[ndim], type, offset
        r.string()
        nd = r.take("I")
        for _ in range(nd):
            r.take("Q")
        r.take("I")
        r.take("Q")
    tinfo = buf[infos:r.p]
    data = buf[(r.p + align - 1) // align * align:]
    i = 0
    while i < len(ops):
        op, arg = ops[i], ops[i + 1]
        i += 2
        if op == "--del":
            kvs = [kv for kv in kvs if kv[0] != arg]
        elif op == "--set":
            k, enc = encode(arg)
            for kv in kvs:
                if kv[0] == k:
                    kv[1] = enc
                    break
            else:
                kvs.append([k, enc])
        else:
            sys.exit("gguf_edit: unknown option %s" % op)
    out = struct.pack("<IIQQ", 0x46554747, 3, nt, len(kvs))
    for k, enc in kvs:
        kb = k.encode()
        out += struct.pack("<Q", len(kb)) + kb + enc
    out += tinfo
    out += b"\0" * ((-len(out)) % align)
    open(dst, "wb").write(out + data)


if __name__ == "__main__":
    main()
