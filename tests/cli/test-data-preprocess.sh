#!/usr/bin/env bash
# `primus data preprocess` end to end through the real binary: plain, gzip,
# zstd and JSON-lines inputs, documents per file or per line, read back by
# an independent MMIDIDX reader (tests/oracle/read_mmidx.py) and compared
# with the input bytes (ByteTokenizer); the same files for any worker count;
# bad input failing with exit 2 and file:line; training on the result, and
# damaged results refused by training; Ctrl-C leaving nothing behind.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=2
PY=/usr/bin/python3
ORACLE=$PRIMUS_SRC/tests/oracle/read_mmidx.py

# Small corpora: lines of words, with an empty line here and there.
gen() { # SEED LINES
  awk -v seed="$1" -v n="$2" 'BEGIN { srand(seed); split("the a jury said grand county election was to of and in that for it on by city", w, " ");
    for (i = 0; i < n; i++) { if (i % 7 == 3) { print ""; continue } m = 3 + int(rand() * 10); line = "";
      for (j = 0; j < m; j++) line = line (j ? " " : "") w[1 + int(rand() * 17)]; print line } }'
}
mkdir in
gen 1 40 > in/a.txt
gen 2 30 > in/b.txt && gzip -k in/b.txt
gen 3 20 > in/c.txt
HAVE_ZSTD=0
if command -v zstd >/dev/null; then zstd -q in/c.txt -o in/c.txt.zst && HAVE_ZSTD=1; fi

# The expected bytes of documents: each followed by a newline by the oracle.
per_file() { for f in "$@"; do cat "$f"; echo; done; }
per_line() { cat "$@" | grep -v '^$'; }

# ---- one document per file ----
run data preprocess --input in/a.txt --input in/b.txt.gz --output_prefix out/files
expect_rc "missing output folder" 2
mkdir out
run data preprocess --input 'no-such-folder/*.jsonl' --output_prefix out/none
expect_rc "a glob in a missing folder matches nothing" 2
expect_in "names the missing folder" "the pattern matched nothing; no-such-folder is not a folder" "$ERR"
run data preprocess --input in/a.txt --input in/b.txt.gz --output_prefix out/files
expect_rc "preprocess per file (plain + gzip)" 0
expect_in "summary line" "2 documents, " "$ERR"
expect_in "summary names the files" "dtype uint16, wrote out/files.bin, out/files.idx" "$ERR"
expect_eq "oracle: header" "$($PY "$ORACLE" out/files --info)" "dtype=uint16 sequences=2 documents=2 tokens=$(cat in/a.txt in/b.txt | wc -c)"
if cmp -s <($PY "$ORACLE" out/files --bytes) <(per_file in/a.txt in/b.txt); then
  ok "oracle: tokens are the files' bytes"
else bad "oracle: tokens differ from the input files"; fi

# ---- one document per line, globs, gzip and zstd ----
if ((HAVE_ZSTD)); then
  run data preprocess --input 'in/*.txt' --input 'in/*.gz' --input in/c.txt.zst --line_docs \
    --output_prefix out/lines --log_interval 50
  expect_rc "preprocess per line (glob, gzip, zstd)" 0
  expect_in "progress lines every --log_interval documents" "preprocess: 50 documents" "$ERR"
  if cmp -s <($PY "$ORACLE" out/lines --bytes) <(per_line in/a.txt in/b.txt in/c.txt in/b.txt in/c.txt); then
    ok "oracle: one sequence per non-empty line, in input order"
  else bad "oracle: line documents differ"; fi
  expect_in "empty lines counted" "skipped 20 empty documents" "$ERR"
else
  ok "# SKIP zstd case: no zstd CLI"
fi

# ---- workers: byte-identical output ----
for i in 1 2 3 4 5 6; do gen $((10 + i)) 3000; done > in/big.txt
run data preprocess --input in/big.txt --line_docs --output_prefix out/w1 --workers 1
expect_rc "workers 1" 0
run data preprocess --input in/big.txt --line_docs --output_prefix out/w2 --workers 2
expect_rc "workers 2" 0
if cmp -s out/w1.bin out/w2.bin && cmp -s out/w1.idx out/w2.idx; then
  ok "1 and 2 workers write identical files"
else bad "worker count changed the output"; fi

# ---- JSON lines ----
cat > in/d.jsonl <<'J'
{"text": "first doc", "id": 1}

{"id": 2, "text": "second\tdoc \u00e9"}
{"text": ""}
J
run data preprocess --input in/d.jsonl --output_prefix out/json --dtype int32
expect_rc "preprocess JSON lines" 0
expect_eq "oracle: JSON documents" "$($PY "$ORACLE" out/json --bytes)" "$(printf 'first doc\nsecond\tdoc \303\251')"
expect_in "int32 on request" "dtype=int32" "$($PY "$ORACLE" out/json --info)"
printf '{"text": "y"}\n{"body": "x"}\n' > in/e.jsonl
run data preprocess --input in/e.jsonl --output_prefix out/bad
expect_rc "missing key" 2
expect_in "missing key names file:line" "in/e.jsonl:2: no key \"text\"" "$ERR"
printf '{"text": "ok"}\n{"text": oops}\n' > in/f.jsonl
run data preprocess --input in/f.jsonl --output_prefix out/bad --workers 2
expect_rc "bad JSON line" 2
expect_in "bad JSON names file:line" "in/f.jsonl:2: bad JSON" "$ERR"
run data preprocess --input in/e.jsonl --output_prefix out/bad --json_keys body --json_keys text
expect_rc "two json keys" 2
expect_in "one key only, said so" "not supported yet" "$ERR"
if ls out | grep -q '^bad'; then bad "a failed run left files: $(ls out)"; else ok "failed runs left no files"; fi

# ---- other bad arguments ----
run data preprocess --input 'in/nothing*.txt' --output_prefix out/bad
expect_rc "glob matching nothing" 2
expect_in "names the pattern" "in/nothing*.txt" "$ERR"
run data preprocess --input in/a.txt --output_prefix out/bad --append_eod
expect_rc "append_eod without an EOD token" 2
expect_in "says why" "no end-of-document token" "$ERR"
run data preprocess --input in/a.txt
expect_rc "no output prefix" 2
run data preprocess --input in/a.txt --output_prefix out/bad --dtype float32
expect_rc "bad dtype" 2
printf 'plain text' > in/fake.gz
run data preprocess --input in/fake.gz --output_prefix out/bad
expect_rc "not gzip" 2
expect_in "names the file" "in/fake.gz: named .gz but is not gzip data" "$ERR"

# ---- training reads the result ----
{ exp_header pre; cat <<Y
      hidden_size: 32
      num_layers: 1
      num_attention_heads: 4
      num_query_groups: 2
      ffn_hidden_size: 64
      seq_length: 32
      max_position_embeddings: 64
      vocab_size: 256
      data_path: $T/out/w1
      split: "100,0,0"
      data_shuffle: false
      micro_batch_size: 2
      global_batch_size: 2
      train_iters: 2
      eval_interval: 1000
      log_interval: 1
      save: null
Y
} > exp.yaml
run train pretrain --config exp.yaml
expect_rc "train 2 steps on the preprocessed data" 0
EV=$(ls -d "$T"/ws/team/tester/pre/run-*/events.jsonl | tail -1)
expect_eq "two steps logged" "$(grep -c '^{"step"' "$EV")" 2

cp out/w1.bin out/cut.bin
head -c 100 out/w1.idx > out/cut.idx
run train pretrain --config exp.yaml data_path="$T/out/cut"
expect_rc "truncated .idx refused" 2
expect_in "names the .idx" "cut.idx" "$ERR"
cp out/w1.idx out/short.idx
head -c $(($(stat -c %s out/w1.bin) - 2)) out/w1.bin > out/short.bin
run train pretrain --config exp.yaml data_path="$T/out/short"
expect_rc ".bin of the wrong size refused" 2
expect_in "names the dataset" "short" "$ERR"

# ---- Ctrl-C: nothing published, no temporaries ----
# The input is a FIFO held open by this shell, so the run is certainly
# still reading when the signal comes.
mkfifo in/pipe.txt
for W in 1 2; do
  exec 3<>in/pipe.txt
  "$PRIMUS_BIN" data preprocess --input in/pipe.txt --line_docs --output_prefix out/int --workers $W 2>"$T/int.err" &
  PID=$!
  printf 'some text\nmore text\n' >&3
  for _ in $(seq 100); do ls out | grep -q '^int.*tmp' && break; sleep 0.1; done
  if ls out | grep -q '^int.*tmp'; then ok "workers $W: the run is writing (temporaries exist)"; else bad "workers $W: no temporaries seen"; fi
  sleep 0.3 # let it block in read() on the FIFO
  kill -INT $PID
  for _ in $(seq 100); do kill -0 $PID 2>/dev/null || break; sleep 0.1; done
  if kill -0 $PID 2>/dev/null; then kill -KILL $PID; bad "workers $W: SIGINT did not stop the run within 10 s"; fi
  wait $PID
  RC=$?
  exec 3>&-
  expect_eq "workers $W: SIGINT: exit 3" "$RC" 3
  expect_in "workers $W: SIGINT: says interrupted" "interrupted" "$(cat "$T/int.err")"
  if ls out | grep -q '^int'; then bad "workers $W: interrupted run left: $(ls out | grep '^int')"; else ok "workers $W: interrupted run left no files"; fi
done

finish
