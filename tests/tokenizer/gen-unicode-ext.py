#!/usr/bin/env python3
"""gen-unicode-ext.py - writes src/data/unicode_ext.c, the character
properties of Hugging Face tokenizers' general components beyond the
pre-tokenizer classes of unicode_tab.c:
  word   \\w of the Whitespace pre-tokenizer (the Rust regex crate's Unicode
         \\w: Alphabetic, marks, Nd, Pc, Join_Control);
  punct  the Punctuation pre-tokenizer's test (ASCII punctuation, or a
         general category P*);
  lower  the Lowercase normalizer (Rust's char::to_lowercase: the simple
         lowercase mappings plus SpecialCasing's unconditional ones);
  kdec   NFKD of each code point (the full compatibility decomposition in
         canonical order; Hangul syllables are left to the algorithm);
  combining  the marks the StripAccents normalizer removes (M*);
  mn     the marks BertNormalizer's strip_accents removes after NFD (Mn);
  bert_ctl, bert_ws  what BertNormalizer's clean_text removes (NUL, U+FFFD,
         Cc, Cf, Co but tab, newline and carriage return) and turns into a space
         (White_Space);
  bert_cjk  the ideograph blocks its handle_chinese_chars spaces out.

  gen-unicode-ext.py UCD_DIR [REF_DIR] > src/data/unicode_ext.c

UCD_DIR is Debian's unicode-data (/usr/share/unicode, Unicode 15.0). The
reference (tokenizers 0.23.2) follows newer tables for \\w and lowercase and an
older one for punctuation; REF_DIR, when given, holds what it does for every
code point (word.txt and punct.txt: one decimal code point per line;
lower.txt and nfkd.txt: a code point then what it becomes, decimal;
combining.txt, mn.txt, bert-ctl.txt, bert-ws.txt, bert-cjk.txt: the sets), as
tests/tokenizer/uprops.mjs --dump writes them. Where the reference differs
from UCD_DIR it wins, and the differing code points are listed in tables of
their own, so the provenance of every entry stays visible."""
import os
import sys

import ucd


def ranges_of(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def load(d):
    cat, lower, ccc, dmap = {}, {}, {}, {}
    for c, f, in_range in ucd.unicode_data(d):
        cat[c] = f[2]
        if in_range:
            continue
        ccc[c] = int(f[3])
        if f[5]:
            dmap[c] = (f[5].startswith("<"), [int(x, 16) for x in f[5].split() if x[0] != "<"])
        if f[13]:
            lower[c] = [int(f[13], 16)]
    for line in open(os.path.join(d, "SpecialCasing.txt")):
        line = line.split("#")[0].strip()
        if not line:
            continue
        f = [x.strip() for x in line.split(";")]
        if len(f) >= 5 and f[4]:
            continue  # conditional mappings: not applied by char::to_lowercase
        c = int(f[0], 16)
        lo = [int(x, 16) for x in f[1].split()]
        if lo != [c]:
            lower[c] = lo

    def prop(fname, want):
        return ucd.prop(d, fname, want)

    alpha = prop("DerivedCoreProperties.txt", "Alphabetic")
    join = prop("PropList.txt", "Join_Control")
    word = alpha | join | {c for c, g in cat.items() if g[0] == "M" or g in ("Nd", "Pc")}
    punct = {c for c, g in cat.items() if g[0] == "P"}
    punct |= {c for c in range(0x21, 0x7F) if not chr(c).isalnum()}

    def full(c):
        if c not in dmap:
            return [c]
        return [y for x in dmap[c][1] for y in full(x)]

    kdec = {}
    for c in dmap:
        if 0xAC00 <= c <= 0xD7A3:
            continue
        seq = full(c)
        for i in range(1, len(seq)):  # canonical order (stable by class)
            j = i
            while j > 0 and ccc.get(seq[j], 0) and ccc.get(seq[j - 1], 0) > ccc.get(seq[j], 0):
                seq[j - 1], seq[j] = seq[j], seq[j - 1]
                j -= 1
        kdec[c] = seq
    combining = {c for c, g in cat.items() if g[0] == "M"}
    mn = {c for c, g in cat.items() if g == "Mn" and not (c in dmap and not dmap[c][0])}
    space = prop("PropList.txt", "White_Space")
    ctl = {c for c, g in cat.items() if g in ("Cc", "Cf", "Co")} - {9, 10, 13}
    ctl |= {0, 0xFFFD}
    bws = (space | {9, 10, 13}) - ctl - {32}
    cjk = set()
    for a, b in ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
                 (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)):
        cjk.update(range(a, b + 1))
    sets = {"combining": combining, "mn": mn, "bert_ctl": ctl, "bert_ws": bws, "bert_cjk": cjk}
    return word, punct, lower, kdec, sets


def emit_comment(text):
    import textwrap
    lines = textwrap.wrap(text, 93)
    print("/* " + "\n * ".join(lines) + " */")


def emit_ranges(name, rs, comment):
    emit_comment(comment)
    ucd.emit_items("const uint32_t %s[][2]" % name, ["{0x%X, 0x%X}," % (a, b) for a, b in rs],
                   "{0, 0},")
    print("const size_t %s_n = %d;\n" % (name, len(rs)))


def emit_map(name, m, comment):
    cps, rows = [], []
    for c in sorted(m):
        rows.append("{0x%X, %d, %d}," % (c, len(cps), len(m[c])))
        cps.extend(m[c])
    emit_comment(comment)
    ucd.emit_items("const uint32_t %s[][3]" % name, rows)
    print("const size_t %s_n = %d;\n" % (name, len(rows)))
    ucd.emit_items("const uint32_t %s_cps[]" % name, ["0x%X," % c for c in cps])
    print()


SET_DOC = {
    "combining": "The marks StripAccents removes (M*).",
    "mn": "The marks BertNormalizer's strip_accents removes after NFD (Mn without a canonical "
          "decomposition).",
    "bert_ctl": "What BertNormalizer's clean_text removes: NUL, U+FFFD, Cc, Cf, Co but tab, "
                "newline, carriage return.",
    "bert_ws": "What BertNormalizer's clean_text turns into a space: White_Space, tab, newline, "
               "carriage return, less the removed ones and the space itself.",
    "bert_cjk": "The CJK ideograph blocks BertNormalizer's handle_chinese_chars puts spaces "
                "around.",
}
SET_FILE = {"combining": "combining.txt", "mn": "mn.txt", "bert_ctl": "bert-ctl.txt",
            "bert_ws": "bert-ws.txt", "bert_cjk": "bert-cjk.txt"}


def main():
    word, punct, lower, kdec, sets = load(sys.argv[1])
    notes = {"word": "", "punct": "", "lower": "", "kdec": ""}
    notes.update({k: "" for k in sets})
    if len(sys.argv) > 2:
        ref = sys.argv[2]
        rd = lambda f: [l.split() for l in open(os.path.join(ref, f)) if l.strip()]
        rword = {int(x[0]) for x in rd("word.txt")}
        rpunct = {int(x[0]) for x in rd("punct.txt")}
        rlower = {int(x[0]): [int(y) for y in x[1:]] for x in rd("lower.txt")}
        for key, base, refset in (("word", word, rword), ("punct", punct, rpunct)):
            add, rem = sorted(refset - base), sorted(base - refset)
            notes[key] = " The reference adds %d code points to Unicode 15.0's and drops %d." % (
                len(add), len(rem))
        ladd = {c: v for c, v in rlower.items() if lower.get(c) != v}
        lrem = [c for c in lower if c not in rlower]
        notes["lower"] = " The reference differs from Unicode 15.0 on %d code points." % (
            len(ladd) + len(lrem))
        word, punct = rword, rpunct
        lower = {c: v for c, v in lower.items() if c in rlower}
        lower.update(ladd)
        rk = {int(x[0]): [int(y) for y in x[1:]] for x in rd("nfkd.txt")
              if not 0xAC00 <= int(x[0]) <= 0xD7A3}
        kd = [c for c in set(rk) | set(kdec) if rk.get(c) != kdec.get(c)]
        notes["kdec"] = " The reference differs from Unicode 15.0 on %d code points." % len(kd)
        kdec = rk
        for key in sets:
            refset = {int(x[0]) for x in rd(SET_FILE[key])}
            notes[key] = " The reference adds %d code points to Unicode 15.0's and drops %d." % (
                len(refset - sets[key]), len(sets[key] - refset))
            sets[key] = refset
    print("/* unicode_ext.c - generated by tests/tokenizer/gen-unicode-ext.py; do not edit.")
    print(" * Character properties of Hugging Face tokenizers' general components (see")
    print(" * tok-impl.h), as sorted ranges [first, last] or mappings. */")
    print('#include "data/tok-impl.h"\n')
    emit_ranges("prm__ucd_word", ranges_of(word),
                "\\w (Alphabetic, M, Nd, Pc, Join_Control)." + notes["word"])
    emit_ranges("prm__ucd_punct", ranges_of(punct),
                "ASCII punctuation or a category P*." + notes["punct"])
    emit_map("prm__ucd_lower", lower, "Lowercase mappings: [code point, offset, length] into "
             "prm__ucd_lower_cps." + notes["lower"])
    emit_map("prm__ucd_kdec", kdec, "NFKD of each code point it changes (Hangul syllables "
             "aside): [code point, offset, length] into prm__ucd_kdec_cps." + notes["kdec"])
    for key in ("combining", "mn", "bert_ctl", "bert_ws", "bert_cjk"):
        emit_ranges("prm__ucd_" + key, ranges_of(sets[key]), SET_DOC[key] + notes[key])


main()
