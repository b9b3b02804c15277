#!/usr/bin/env bash
# test-tokenizer-unicode.sh - the character tables of the general
# tokenizer.json path (src/data/unicode_ext.c), code point by code point:
# what Hugging Face tokenizers (its Node bindings) does with each one (its
# \w, Punctuation, Lowercase, NFKD, StripAccents, BertNormalizer) is dumped
# again by tests/tokenizer/uprops.mjs and merged with Debian's Unicode data
# by tests/tokenizer/gen-unicode-ext.py; the result must be the committed
# file byte for byte. Plain builds only (a minute of node; no primus code
# runs, so the sanitizers add nothing). Skips when node, the npm data or
# the Unicode data are missing. The same for src/data/unicode_gc.c (the
# general categories and \w of the general regexes: tests/tokenizer/ugc.mjs
# and gen-unicode-gc.py).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NM=$PRIMUS_CACHE/npm/node_modules
NODE=$(command -v node || true)
need_or_skip "$NODE" "$NM/tokenizers/package.json" /usr/share/unicode/UnicodeData.txt
if [[ -n $(sed -n 's/^PRM_SANITIZE:STRING=//p' "${PRIMUS_BUILD:-.}/CMakeCache.txt" 2>/dev/null) ]]; then
  echo "SKIP: a sanitizer build (nothing of primus runs here)"
  exit 0
fi

if "$NODE" "$PRIMUS_SRC/tests/tokenizer/uprops.mjs" "$NM" "$T/uprops" >/dev/null 2>"$T/node.err" &&
  python3 "$PRIMUS_SRC/tests/tokenizer/gen-unicode-ext.py" /usr/share/unicode "$T/uprops" >"$T/unicode_ext.c" 2>>"$T/node.err"; then
  ok "the reference's behaviour dumped for every code point ($(cat "$T"/uprops/*.txt | wc -l) lines)"
  if cmp -s "$T/unicode_ext.c" "$PRIMUS_SRC/src/data/unicode_ext.c"; then
    ok "unicode_ext.c: every code point as Unicode's data and tokenizers' own behaviour give it"
  else
    bad "unicode_ext.c differs from its regeneration: $(diff "$T/unicode_ext.c" "$PRIMUS_SRC/src/data/unicode_ext.c" | head -5)"
  fi
else
  bad "uprops.mjs or gen-unicode-ext.py failed: $(tail -5 "$T/node.err")"
fi

# The general regexes' tables (src/data/unicode_gc.c): each general
# category and \w as Oniguruma matches them, dumped again.
if "$NODE" "$PRIMUS_SRC/tests/tokenizer/ugc.mjs" "$NM" "$T/ugc" >/dev/null 2>"$T/node.err" &&
  python3 "$PRIMUS_SRC/tests/tokenizer/gen-unicode-gc.py" /usr/share/unicode "$T/ugc" >"$T/unicode_gc.c" 2>>"$T/node.err"; then
  ok "the reference's \\p{..} and \\w dumped for every code point ($(cat "$T"/ugc/*.txt | wc -l) lines)"
  if cmp -s "$T/unicode_gc.c" "$PRIMUS_SRC/src/data/unicode_gc.c"; then
    ok "unicode_gc.c: every code point's category as tokenizers' Oniguruma gives it"
  else
    bad "unicode_gc.c differs from its regeneration: $(diff "$T/unicode_gc.c" "$PRIMUS_SRC/src/data/unicode_gc.c" | head -5)"
  fi
else
  bad "ugc.mjs or gen-unicode-gc.py failed: $(tail -5 "$T/node.err")"
fi
finish
