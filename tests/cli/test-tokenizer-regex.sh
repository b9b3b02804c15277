#!/usr/bin/env bash
# test-tokenizer-regex.sh - tokenizer.json files whose Split pre-tokenizers,
# Replace normalizers and Replace decoders use general regexes
# (src/data/regex.c) against Hugging Face tokenizers (its Node bindings),
# id for id and decode for decode: DeepSeek V3's pre-tokenizer (Split
# regexes with \p{P}, \p{S}, CJK ranges) over a byte-level BPE trained by
# the reference, layouts of every construct regex.c implements under every
# Split behaviour, and seeded random patterns (tests/tokenizer/hf-regex.mjs;
# PRM_RX_SEED and PRM_RX_RANDOM pick others); and the Nmt normalizer on
# every code point of the BMP. Inputs: a slice of
# tests/tokenizer/unicode.mjs's text (every script, marks, emoji, format
# characters, every White_Space) and of Brown. Skips when node or the npm
# data are missing.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NM=$PRIMUS_CACHE/npm/node_modules
BROWN=$PRIMUS_CACHE/data/brown.txt
NODE=$(command -v node || true)
need_or_skip "$NODE" "$NM/tokenizers/package.json" "$NM/nlp-corpus/builds/doc-0.json" "$BROWN"
: "${PRIMUS_BUILD:?PRIMUS_BUILD must point at the build folder}"
if ! tokdump_build "$T/tokdump"; then
  finish
  exit
fi

"$NODE" "$PRIMUS_SRC/tests/tokenizer/unicode.mjs" "$NM/nlp-corpus/builds" "$T/unicode.txt" 30 >/dev/null
head -c 100000 "$T/unicode.txt" >"$T/u100k.txt"
head -c 12000 "$T/unicode.txt" >"$T/u12k.txt"
head -c 300000 "$BROWN" >"$T/brown300k.txt"
tail -c 60000 "$T/brown300k.txt" >"$T/brown60k.txt"
# Every code point of the BMP but the surrogates, 64 to a line (Nmt).
"$NODE" -e 'let s = ""; for (let c = 0; c < 0x10000; c++) { if (c >= 0xd800 && c <= 0xdfff) continue;
  s += String.fromCodePoint(c); if (c % 64 == 63) s += "\n"; } require("fs").writeFileSync(process.argv[1], s)' "$T/bmp.txt"

# compare NAME FILE: the reference's ids and decode against primus'.
compare() { hf_compare "$1 on $(basename "$2")" "$T/gen/$1" "$2"; }

if layouts=$("$NODE" "$PRIMUS_SRC/tests/tokenizer/hf-regex.mjs" "$NM" "$T/brown300k.txt" "$T/gen" 2>"$T/node.err" | grep -v '^$'); then
  [[ -s $T/node.err ]] && bad "hf-regex.mjs: $(cat "$T/node.err")"
  # Under the sanitizers a tenth of the text: the same code runs.
  for name in $layouts; do
    case $name in
    rx-random-*) compare "$name" "$T/u12k.txt" ;;
    nmt) compare "$name" "$T/bmp.txt" ;;
    *)
      if [[ -n $san ]]; then
        compare "$name" "$T/u12k.txt"
      else
        compare "$name" "$T/u100k.txt"
        compare "$name" "$T/brown60k.txt"
      fi
      ;;
    esac
  done
else
  bad "hf-regex.mjs: $(cat "$T/node.err")"
fi

# A construct regex.c does not implement is refused naming it, the file and
# the offset, through the CLI too (exit 2).
mkdir -p "$T/bad"
sed 's/\\\\p{N}{1,3}/\\\\p{Han}{1,3}/' "$T/gen/deepseek-v3/tokenizer.json" >"$T/bad/tokenizer.json"
printf '{"text": "abc"}\n' >"$T/docs.jsonl"
run data preprocess --input "$T/docs.jsonl" --output_prefix "$T/out" --tokenizer_type HuggingFaceTokenizer \
  --tokenizer_model "$T/bad"
expect_rc "a \\p{Han} Split is refused" 2
expect_in "the error names the file" "$T/bad/tokenizer.json" "$ERR"
expect_in "the error names the construct and its offset" \
  'not implemented: a \p{...} property other than a general category (scripts, binary properties) (at offset 0)' "$ERR"
run data preprocess --input "$T/docs.jsonl" --output_prefix "$T/out" --tokenizer_type HuggingFaceTokenizer \
  --tokenizer_model "$T/gen/deepseek-v3"
expect_rc "DeepSeek V3's layout preprocesses" 0
finish
