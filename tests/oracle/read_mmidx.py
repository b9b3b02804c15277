#!/usr/bin/python3
"""read_mmidx.py - an independent reader of Megatron's indexed dataset
(MMIDIDX .idx + .bin), standard library only, written from the documented
layout (docs/data.md), not from primus' code. Used by the CLI tests to check
what `primus data preprocess` wrote.

  read_mmidx.py PREFIX            one line per sequence: space-separated ids
  read_mmidx.py PREFIX --bytes    the sequences as bytes (ByteTokenizer), each
                                  followed by a newline
  read_mmidx.py PREFIX --info     dtype=..., sequences=..., documents=...

Layout, little-endian: 9 bytes "MMIDIDX\\0\\0", u64 version (1), u8 dtype code,
u64 sequence count N, u64 document-index length D, i32 sizes[N], i64 byte
pointers[N], i64 document index[D]. The .bin holds the sequences back to back.
Exits 1 with a message on any inconsistency.
"""
import struct, sys

DTYPES = {1: ("B", 1, "uint8"), 2: ("b", 1, "int8"), 3: ("h", 2, "int16"), 4: ("i", 4, "int32"),
          5: ("q", 8, "int64"), 8: ("H", 2, "uint16")}


def die(msg):
    sys.stderr.write("read_mmidx: %s\n" % msg)
    sys.exit(1)


def read(prefix):
    idx = open(prefix + ".idx", "rb").read()
    bin_ = open(prefix + ".bin", "rb").read()
    if idx[:9] != b"MMIDIDX\x00\x00":
        die("bad magic %r" % idx[:9])
    version, = struct.unpack_from("<Q", idx, 9)
    code = idx[17]
    n, d = struct.unpack_from("<QQ", idx, 18)
    if version != 1:
        die("version %d" % version)
    if code not in DTYPES:
        die("dtype code %d" % code)
    fmt, size, name = DTYPES[code]
    off = 34
    if len(idx) != off + 4 * n + 8 * n + 8 * d:
        die(".idx is %d bytes, expected %d" % (len(idx), off + 12 * n + 8 * d))
    sizes = struct.unpack_from("<%di" % n, idx, off)
    ptrs = struct.unpack_from("<%dq" % n, idx, off + 4 * n)
    docs = struct.unpack_from("<%dq" % d, idx, off + 12 * n)
    pos = 0
    seqs = []
    for i in range(n):
        if ptrs[i] != pos:
            die("sequence %d: pointer %d, expected %d" % (i, ptrs[i], pos))
        end = pos + sizes[i] * size
        if end > len(bin_):
            die("sequence %d runs past the .bin (%d bytes)" % (i, len(bin_)))
        seqs.append(struct.unpack_from("<%d%s" % (sizes[i], fmt), bin_, pos))
        pos = end
    if pos != len(bin_):
        die(".bin is %d bytes, sequences use %d" % (len(bin_), pos))
    if not docs or docs[0] != 0 or docs[-1] != n or list(docs) != sorted(docs):
        die("bad document index %r" % (docs[:8],))
    return name, seqs, docs


def main():
    if len(sys.argv) < 2:
        die("usage: read_mmidx.py PREFIX [--bytes|--info]")
    name, seqs, docs = read(sys.argv[1])
    mode = sys.argv[2] if len(sys.argv) > 2 else ""
    if mode == "--info":
        print("dtype=%s sequences=%d documents=%d tokens=%d" %
              (name, len(seqs), len(docs) - 1, sum(len(s) for s in seqs)))
    elif mode == "--bytes":
        out = sys.stdout.buffer
        for s in seqs:
            if any(t < 0 or t > 255 for t in s):
                die("token out of byte range")
            out.write(bytes(s) + b"\n")
    else:
        for s in seqs:
            print(" ".join(map(str, s)))


if __name__ == "__main__":
    main()
