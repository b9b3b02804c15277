#!/usr/bin/env bash
# Tokenizer training and the tokenizer benchmark through the real binary:
# `data train-tokenizer` is repeatable and writes a tokenizer.json that
# HuggingFaceTokenizer loads; text preprocessed with it decodes back to the
# input under an independent byte-level decoder (tests/tokenizer/
# bytelevel_decode.py); `benchmark tokenizer` reports, and with --compare
# agrees with the Rust references' token counts (tiktoken, Hugging Face
# tokenizers) when node and the packages exist.
source "$(dirname "$0")/lib.sh"
cd "$T"
PY=/usr/bin/python3

# A corpus with structure and some Unicode: lines of words, accents, CJK.
awk 'BEGIN { srand(3); split("the of and to in that is was he for it with as his on be at by café naïve 東京 😀 don'"'"'t 1984 --", w, " ");
  for (l = 0; l < 400; l++) { s = ""; n = 5 + int(rand() * 10);
    for (i = 0; i < n; i++) s = s (i ? " " : "") w[1 + int(rand() * 26)];
    print s } }' > corpus.txt

run data train-tokenizer --input corpus.txt --vocab_size 300 --output tok.json
expect_rc "train-tokenizer" 0
expect_in "reports the merges" "merges" "$ERR"
run data train-tokenizer --input 'corp*.txt' --vocab-size 300 --output tok2.json
expect_rc "train-tokenizer again (glob, dashes)" 0
if cmp -s tok.json tok2.json; then ok "training is repeatable"; else bad "two runs differ"; fi
merges() { $PY -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["model"]["merges"]))' "$1"; }
expect_eq "merges fill the vocabulary: 300 - 1 special - 256 bytes" "$(merges tok.json)" 43
# 26 distinct words: once each is one token nothing repeats, and it says so.
run data train-tokenizer --input corpus.txt --vocab_size 2000 --output big.json
expect_rc "a vocabulary larger than the text supports" 0
expect_in "warns that pairs ran out" "no more repeated pairs" "$ERR"
if (($(merges big.json) < 2000 - 257)); then ok "stopped early"; else bad "did not stop early"; fi

run data preprocess --input corpus.txt --line_docs --output_prefix ds \
  --tokenizer_type HuggingFaceTokenizer --tokenizer_model tok.json
expect_rc "preprocess with the trained tokenizer" 0
$PY "$PRIMUS_SRC/tests/oracle/read_mmidx.py" ds > ids.txt
if $PY "$PRIMUS_SRC/tests/tokenizer/bytelevel_decode.py" tok.json < ids.txt > decoded.txt &&
   cmp -s decoded.txt corpus.txt; then
  ok "decode(encode(x)) == x through the trained tokenizer"
else
  bad "round trip through the trained tokenizer differs"
fi
RAW=$(wc -c < corpus.txt)
TOK=$(wc -w < ids.txt)
if ((TOK < RAW / 2)); then ok "the trained tokenizer compresses ($TOK tokens for $RAW bytes)"; else bad "no compression: $TOK tokens for $RAW bytes"; fi

# Training on it: the checkpoint carries tokenizer.json, so generate needs
# nothing but the folder; it stops at the end-of-document token unprinted.
{ exp_header bpe; cat <<Y
      hidden_size: 32
      num_layers: 1
      num_attention_heads: 2
      num_query_groups: 1
      ffn_hidden_size: 64
      seq_length: 16
      max_position_embeddings: 64
      vocab_size: null
      data_path: $T/ds
      tokenizer_type: HuggingFaceTokenizer
      tokenizer_model: $T/tok.json
      split: "90,10,0"
      micro_batch_size: 2
      global_batch_size: 2
      train_iters: 3
      eval_iters: 0
      save: $T/ckpt
      save_interval: 3
Y
} > exp.yaml
run train pretrain --config exp.yaml
expect_rc "train on the trained tokenizer's data" 0
expect_in "vocabulary from the tokenizer, padded to 128" "vocab 384" "$ERR"
if cmp -s tok.json ckpt/iter_0000003/tokenizer.json; then ok "checkpoint carries tokenizer.json"; else bad "tokenizer.json not in the checkpoint"; fi
run generate --load ckpt --prompt "the jury" --max_new_tokens 8 --temperature 0
expect_rc "generate with the checkpoint's own tokenizer" 0
expect_in "continues the prompt" "the jury" "$OUT"
expect_not_in "end-of-document not printed" "<|endoftext|>" "$OUT"

# Special tokens by name: a tokenizer with <s> and </s> (ids 0 and 1) frames
# every document with them.
run data train-tokenizer --input corpus.txt --vocab_size 300 --output st.json \
  --special_tokens '<s>' --special_tokens '</s>'
expect_rc "train-tokenizer with special tokens" 0
run data preprocess --input corpus.txt --line_docs --output_prefix framed --append_eod \
  --tokenizer_type HuggingFaceTokenizer --tokenizer_model st.json --bos_token '<s>' --eod_token '</s>'
expect_rc "preprocess with --bos_token and --eod_token" 0
FRAMED=$($PY "$PRIMUS_SRC/tests/oracle/read_mmidx.py" framed | awk '$1 != 0 || $NF != 1 { bad++ } END { print NR, bad + 0 }')
expect_eq "every document is <s> ... </s> (400 documents, 0 exceptions)" "$FRAMED" "400 0"
run data preprocess --input corpus.txt --output_prefix nope --tokenizer_type HuggingFaceTokenizer \
  --tokenizer_model st.json --bos_token '<bos>'
expect_rc "an unknown --bos_token" 2
expect_in "names the token" "<bos>" "$ERR"

run data train-tokenizer --input corpus.txt --output tok3.json
expect_rc "vocab_size missing" 2
run data train-tokenizer --input corpus.txt --vocab_size 100 --output tok3.json
expect_rc "vocab_size below the byte tokens" 2
expect_in "says why" "256 byte tokens" "$ERR"
run data train-tokenizer --input 'nothing-*.txt' --vocab_size 300 --output tok3.json
expect_rc "no input matched" 2
if [[ -e tok3.json ]]; then bad "nothing written on errors"; else ok "nothing written on errors"; fi

run benchmark tokenizer --input corpus.txt --tokenizer_type HuggingFaceTokenizer --tokenizer_model tok.json --repeat 1
expect_rc "benchmark tokenizer" 0
expect_in "reports MB/s" "MB/s" "$OUT"
NMD=$PRIMUS_CACHE/npm/node_modules
if command -v node >/dev/null && [[ -d $NMD/tiktoken && -d $NMD/tokenizers ]]; then
  # The Rust references in the same run: tiktoken for GPT-2's encoding,
  # Hugging Face tokenizers for the tokenizer.json trained above.
  run benchmark tokenizer --input corpus.txt --workers 2 --repeat 1 --compare
  expect_rc "benchmark tokenizer --compare" 0
  expect_in "token counts agree with tiktoken" "x tiktoken r50k_base; token counts agree" "$OUT"
  run benchmark tokenizer --input corpus.txt --repeat 1 --compare --tokenizer_type HuggingFaceTokenizer --tokenizer_model tok.json -o cmp.csv
  expect_rc "benchmark tokenizer --compare (tokenizer.json)" 0
  expect_in "token counts agree with tokenizers" "tok.json; token counts agree" "$OUT"
  expect_in "the table has both rows" "tokenizers,tokenizers " "$(cat cmp.csv 2>/dev/null)"
  run benchmark tokenizer --input corpus.txt --repeat 1 --compare --tokenizer_type ByteTokenizer
  expect_rc "no reference for ByteTokenizer" 2
  expect_in "says so" "no Rust reference for ByteTokenizer" "$ERR"
else
  echo "SKIP: node, tiktoken or tokenizers missing: no --compare run"
fi
finish
