#!/usr/bin/env bash
# test-tokenizer-precompiled.sh - the Precompiled normalizer (SentencePiece's
# charsmap applied per grapheme cluster: src/data/charsmap.c, grapheme.c)
# against Hugging Face tokenizers (its Node bindings), id for id and decode
# for decode, with charsmaps built by the test (tests/tokenizer/
# hf-precompiled.mjs, charsmap.mjs; none can be downloaded here): an
# NFKC-like map of 2,712 keys with multi-character keys on the adversarial
# text of tests/tokenizer/unicode.mjs (every script, stacked marks, emoji
# sequences, format characters) and on Brown; and a probe that shows for
# every code point but the surrogates whether it joins the letter before or
# after it in a cluster (under the sanitizers one block of 1024 in 16). A
# malformed charsmap is refused naming the file (exit 2); the cluster table
# (src/data/unicode_gcb.c) regenerates byte for byte. Skips when node, the
# npm data or the Unicode data are missing.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NM=$PRIMUS_CACHE/npm/node_modules
BROWN=$PRIMUS_CACHE/data/brown.txt
NODE=$(command -v node || true)
need_or_skip "$NODE" "$NM/tokenizers/package.json" "$NM/nlp-corpus/builds/doc-0.json" "$BROWN" \
  /usr/share/unicode/auxiliary/GraphemeBreakProperty.txt
: "${PRIMUS_BUILD:?PRIMUS_BUILD must point at the build folder}"
if ! tokdump_build "$T/tokdump"; then
  finish
  exit
fi

"$NODE" "$PRIMUS_SRC/tests/tokenizer/unicode.mjs" "$NM/nlp-corpus/builds" "$T/unicode.txt" 30 \
  >/dev/null
head -c 100000 "$T/unicode.txt" >"$T/u100k.txt"
head -c 12000 "$T/unicode.txt" >"$T/u12k.txt"
head -c 60000 "$BROWN" >"$T/brown60k.txt"
# The cluster table regenerates from Unicode's data byte for byte.
TABLE=$PRIMUS_SRC/src/data/unicode_gcb.c
if python3 "$PRIMUS_SRC/tests/tokenizer/gen-unicode-gcb.py" /usr/share/unicode >"$T/gcb.c" \
  2>"$T/gen.err" && cmp -s "$T/gcb.c" "$TABLE"; then
  ok "unicode_gcb.c regenerates byte for byte from Unicode's data"
else
  bad "unicode_gcb.c differs from its regeneration: $(cat "$T/gen.err")
$(diff "$T/gcb.c" "$TABLE" | head -5)"
fi

step=1
[[ -n $san ]] && step=16
if "$NODE" "$PRIMUS_SRC/tests/tokenizer/hf-precompiled.mjs" "$NM" "$T/gen" $step >"$T/node.out" \
  2>"$T/node.err"; then
  ok "hf-precompiled.mjs: $(tr '\n' ' ' <"$T/node.out")"
  if [[ -n $san ]]; then
    hf_compare "Precompiled on u12k.txt" "$T/gen/precompiled" "$T/u12k.txt"
  else
    hf_compare "Precompiled on u100k.txt" "$T/gen/precompiled" "$T/u100k.txt"
    hf_compare "Precompiled on brown60k.txt" "$T/gen/precompiled" "$T/brown60k.txt"
  fi
  hf_compare "Precompiled's clusters, every code point after and before a letter" \
    "$T/gen/gprobe" "$T/gen/gprobe.txt"
else
  bad "hf-precompiled.mjs: $(cat "$T/node.err")"
fi

# A malformed charsmap is refused naming the file and the reason (exit 2).
mkdir -p "$T/bad"
sed 's/"precompiled_charsmap":"[^"]*"/"precompiled_charsmap":"AAAAAA=="/' \
  "$T/gen/precompiled/tokenizer.json" >"$T/bad/tokenizer.json"
printf '{"text": "abc"}\n' >"$T/docs.jsonl"
run data preprocess --input "$T/docs.jsonl" --output_prefix "$T/out" \
  --tokenizer_type HuggingFaceTokenizer --tokenizer_model "$T/bad"
expect_rc "a malformed charsmap is refused" 2
expect_in "the error names the file and the reason" \
  "$T/bad/tokenizer.json: normalizer: Precompiled: precompiled_charsmap: not a valid" "$ERR"
finish
