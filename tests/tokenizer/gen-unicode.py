#!/usr/bin/env python3
"""gen-unicode.py - writes src/data/unicode_tab.c, the code point classes
primus' pre-tokenizers use (White_Space; the letter categories Lu Ll Lt Lm
Lo; marks M; numbers N; everything else), as sorted ranges.

  gen-unicode.py UCD_DIR [ADDED_DIR] > src/data/unicode_tab.c

UCD_DIR holds UnicodeData.txt, PropList.txt and DerivedNormalizationProps.txt
(the NFC tables: combining classes, canonical decompositions, composites;
Debian's unicode-data:
/usr/share/unicode, Unicode 15.0). The reference implementations (tiktoken
1.0.22's Rust regex tables, tokenizers 0.23.2's Oniguruma) follow Unicode
16.0; ADDED_DIR, when given, holds one file per class (Lu.txt Ll.txt Lt.txt
Lm.txt Lo.txt M.txt N.txt, one decimal code point per line, as
tests/tokenizer/uclass.mjs dumps a reference engine's \\p{..} classes);
code points unassigned in UCD_DIR that appear there are added, in a table
of their own, so the provenance of every range stays visible."""
import os
import sys

CLASSES = ["OTHER", "WS", "LU", "LL", "LT", "LM", "LO", "M", "N"]


def load_ucd(d):
    cat = {}
    first = None
    for line in open(os.path.join(d, "UnicodeData.txt")):
        f = line.split(";")
        c, name, g = int(f[0], 16), f[1], f[2]
        if name.endswith("First>"):
            first = c
            continue
        if name.endswith("Last>"):
            for x in range(first, c + 1):
                cat[x] = g
            continue
        cat[c] = g
    ws = set()
    for line in open(os.path.join(d, "PropList.txt")):
        line = line.split("#")[0].strip()
        if not line:
            continue
        r, p = [x.strip() for x in line.split(";")]
        if p != "White_Space":
            continue
        a, _, b = r.partition("..")
        ws.update(range(int(a, 16), int(b or a, 16) + 1))
    return cat, ws


def cls_of(g, is_ws):
    if is_ws:
        return "WS"
    if g in ("Lu", "Ll", "Lt", "Lm", "Lo"):
        return g.upper()
    if g[0] == "M":
        return "M"
    if g[0] == "N":
        return "N"
    return "OTHER"


def ranges(m):
    out = []
    for c in sorted(m):
        k = m[c]
        if out and out[-1][1] == c - 1 and out[-1][2] == k:
            out[-1][1] = c
        else:
            out.append([c, c, k])
    return [r for r in out if r[2] != "OTHER"]


def emit(name, rs):
    print("static const prm__urange_t %s[] = {" % name)
    line = "   "
    for a, b, k in rs:
        item = " {0x%X, 0x%X, PRM__U_%s}," % (a, b, k)
        if len(line) + len(item) > 98:
            print(line)
            line = "   "
        line += item
    print(line)
    print("};")


def load_nfc(d):
    """Canonical combining classes, full canonical decompositions and the
    primary composites (pairs not in Full_Composition_Exclusion)."""
    ccc, dec = {}, {}
    for line in open(os.path.join(d, "UnicodeData.txt")):
        f = line.split(";")
        c = int(f[0], 16)
        if int(f[3]):
            ccc[c] = int(f[3])
        if f[5] and not f[5].startswith("<"):
            dec[c] = [int(x, 16) for x in f[5].split()]
    excl = set()
    for line in open(os.path.join(d, "DerivedNormalizationProps.txt")):
        line = line.split("#")[0].strip()
        if not line:
            continue
        parts = [x.strip() for x in line.split(";")]
        if parts[1] != "Full_Composition_Exclusion":
            continue
        a, _, b = parts[0].partition("..")
        excl.update(range(int(a, 16), int(b or a, 16) + 1))

    def full(c):
        if c not in dec:
            return [c]
        return [y for x in dec[c] for y in full(x)]

    comp = sorted((dec[c][0], dec[c][1], c) for c in dec if len(dec[c]) == 2 and c not in excl)
    return ccc, {c: full(c) for c in dec}, comp


def emit_nfc(d):
    ccc, dec, comp = load_nfc(d)
    rs = []
    for c in sorted(ccc):
        if rs and rs[-1][1] == c - 1 and rs[-1][2] == ccc[c]:
            rs[-1][1] = c
        else:
            rs.append([c, c, ccc[c]])
    print("/* Canonical combining classes other than 0: [first, last, class]. */")
    print("const uint32_t prm__ucd_ccc[][3] = {")
    line = "   "
    for a, b, k in rs:
        item = " {0x%X, 0x%X, %d}," % (a, b, k)
        if len(line) + len(item) > 98:
            print(line)
            line = "   "
        line += item
    print(line)
    print("};")
    print("const size_t prm__ucd_ccc_n = %d;" % len(rs))
    print()
    print("/* Full canonical decompositions (Hangul syllables are computed):")
    print(" * code point, offset and length in prm__ucd_dec_cps. */")
    cps = []
    print("const uint32_t prm__ucd_dec[][3] = {")
    line = "   "
    for c in sorted(dec):
        item = " {0x%X, %d, %d}," % (c, len(cps), len(dec[c]))
        cps.extend(dec[c])
        if len(line) + len(item) > 98:
            print(line)
            line = "   "
        line += item
    print(line)
    print("};")
    print("const size_t prm__ucd_dec_n = %d;" % len(dec))
    print("const uint32_t prm__ucd_dec_cps[] = {")
    line = "   "
    for c in cps:
        item = " 0x%X," % c
        if len(line) + len(item) > 98:
            print(line)
            line = "   "
        line += item
    print(line)
    print("};")
    print()
    print("/* Primary composites: first, second, composite; sorted. */")
    print("const uint32_t prm__ucd_comp[][3] = {")
    line = "   "
    for a, b, c in comp:
        item = " {0x%X, 0x%X, 0x%X}," % (a, b, c)
        if len(line) + len(item) > 98:
            print(line)
            line = "   "
        line += item
    print(line)
    print("};")
    print("const size_t prm__ucd_comp_n = %d;" % len(comp))


def main():
    cat, ws = load_ucd(sys.argv[1])
    base = {c: cls_of(cat.get(c, "Cn"), c in ws) for c in range(0x110000)}
    added = {}
    if len(sys.argv) > 2:
        for k in ["LU", "LL", "LT", "LM", "LO", "M", "N"]:
            p = os.path.join(sys.argv[2], k[:1] + k[1:].lower() + ".txt")
            for line in open(p):
                if line.strip():
                    c = int(line)
                    if c not in cat:
                        added[c] = k
    print("/* unicode_tab.c - generated by tests/tokenizer/gen-unicode.py; do not edit.")
    print(" * The code point classes of the pre-tokenizers (see prm__ucls), as ranges")
    print(" * [first, last] of one class; code points in no range are OTHER. */")
    print('#include "data/tok-impl.h"')
    print()
    print("/* Unicode 15.0: UnicodeData.txt and PropList.txt (White_Space). */")
    emit("prm__ucd_base", ranges(base))
    print("const size_t prm__ucd_base_n = sizeof prm__ucd_base / sizeof prm__ucd_base[0];")
    print()
    print("/* Assigned after 15.0, as the reference engines (Unicode 16.0) classify them. */")
    emit("prm__ucd_added", ranges(added) or [[0, 0, "OTHER"]])
    print("const size_t prm__ucd_added_n = %d;" % len(ranges(added)))
    print()
    print("const prm__urange_t *const prm__ucd_tables[2] = {prm__ucd_base, prm__ucd_added};")
    print()
    print("/* NFC (Unicode 15.0: UnicodeData.txt, DerivedNormalizationProps.txt). */")
    emit_nfc(sys.argv[1])


main()
