"""ucd.py - what gen-unicode.py and gen-unicode-ext.py both need: Unicode's
data files read (Debian's unicode-data, /usr/share/unicode) and C tables
written in the layout of src/data/unicode_tab.c and unicode_ext.c."""
import os


def unicode_data(d):
    """UnicodeData.txt as a list of (code point, fields), the First/Last
    ranges expanded (their code points share the first line's fields)."""
    rows = []
    first = None
    for line in open(os.path.join(d, "UnicodeData.txt")):
        f = line.rstrip("\n").split(";")
        c, name = int(f[0], 16), f[1]
        if name.endswith("First>"):
            first = f
            continue
        if name.endswith("Last>"):
            for x in range(int(first[0], 16), c + 1):
                rows.append((x, first, True))
            continue
        rows.append((c, f, False))
    return rows


def categories(d):
    """The general category of every assigned code point."""
    return {c: f[2] for c, f, _ in unicode_data(d)}


def prop(d, fname, want):
    """The code points that a property file (PropList.txt,
    DerivedCoreProperties.txt...) gives the property want."""
    s = set()
    for line in open(os.path.join(d, fname)):
        line = line.split("#")[0].strip()
        if not line:
            continue
        parts = [x.strip() for x in line.split(";")]
        if parts[1] != want:
            continue
        a, _, b = parts[0].partition("..")
        s.update(range(int(a, 16), int(b or a, 16) + 1))
    return s


def emit_items(decl, items, empty=None):
    """Prints `decl = {` then the items (C initialisers), as many to a line
    as fit in 98 columns, then `};`; empty is the item printed when there
    are none."""
    print(decl + " = {")
    line = "   "
    for item in items:
        item = " " + item
        if len(line) + len(item) > 98:
            print(line)
            line = "   "
        line += item
    if not items and empty:
        line += " " + empty
    print(line)
    print("};")
