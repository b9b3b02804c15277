#!/usr/bin/python3
"""bytelevel_decode.py - decodes token ids with a byte-level BPE
tokenizer.json, written from the format (GPT-2's bytes-to-unicode map),
independently of primus: the oracle for the trained tokenizer's round trip.

  bytelevel_decode.py TOKENIZER.json < ids.txt > text
ids.txt: one document per line, space-separated ids; each decoded document
is written followed by a newline. Exits 1 on an id the vocabulary lacks.
"""
import json, sys


def byte_map():
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = b
        else:
            chars[b] = 256 + n
            n += 1
    return {chr(c): b for b, c in chars.items()}


def main():
    tok = json.load(open(sys.argv[1], encoding="utf-8"))
    to_byte = byte_map()
    specials = {t["id"]: t["content"].encode() for t in tok.get("added_tokens", [])}
    vocab = {i: s for s, i in tok["model"]["vocab"].items()}
    out = sys.stdout.buffer
    for line in sys.stdin:
        doc = bytearray()
        for t in line.split():
            i = int(t)
            if i in specials:
                doc += specials[i]
            elif i in vocab:
                doc += bytes(to_byte[c] for c in vocab[i])
            else:
                sys.stderr.write("bytelevel_decode: id %d not in the vocabulary\n" % i)
                sys.exit(1)
        out.write(bytes(doc) + b"\n")


if __name__ == "__main__":
    main()
