#!/usr/bin/env bash
# What the fuzzers of issue 26 found, as a user meets it through the real
# binary (the inputs themselves are replayed by the fuzz-smoke-* tests):
# - a tiktoken rank file or tokenizer.json with one huge id or rank is
#   refused with exit 2 naming the file and the id, instead of allocating
#   gigabytes or spinning;
# - a run folder whose events.jsonl holds absurd numbers (1e60 steps and
#   times) is analysed and reported, not undefined behaviour.
source "$(dirname "$0")/lib.sh"
cd "$T"

printf 'hello world\n' > in.txt
mkdir -p out

# A 43-byte kind of file: one token at rank 2^31 - 16.
printf 'QQ== 0\nQg== 2147483632\n' > huge.tiktoken
run data preprocess --input in.txt --output_prefix out/huge --tokenizer_type GPT2BPETokenizer \
  --tokenizer_model huge.tiktoken
expect_rc "a rank file with a huge rank" 2
expect_in "names the file" "huge.tiktoken" "$ERR"
expect_in "says what is wrong" "rank 2147483632 is out of range" "$ERR"
if [[ -e out/huge.idx ]]; then bad "no dataset written"; else ok "no dataset written"; fi

# Ranks from 2^30 made the table-size doubling loop wrap and spin.
printf 'QQ== 1073741824\nQg== 0\n' > wrap.tiktoken
run data preprocess --input in.txt --output_prefix out/wrap --tokenizer_type GPT2BPETokenizer \
  --tokenizer_model wrap.tiktoken
expect_rc "a rank of 2^30" 2
expect_in "names the file and rank" "wrap.tiktoken: rank 1073741824 is out of range" "$ERR"

# tokenizer.json: a byte-level BPE whose one added token has id 2^31 - 648.
python3 - <<'PY'
import json
# GPT-2's bytes-to-unicode alphabet: one token per byte.
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
v = {chr(c): i for i, c in enumerate(cs)}
t = {"version": "1.0", "added_tokens": [{"id": 2147483000, "content": "<|endoftext|>",
     "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
     "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
     "trim_offsets": True, "use_regex": True}, "post_processor": None,
     "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": v, "merges": []}}
json.dump(t, open("tokenizer.json", "w"))
PY
run data preprocess --input in.txt --output_prefix out/hf --tokenizer_type HuggingFaceTokenizer \
  --tokenizer_model tokenizer.json
expect_rc "a tokenizer.json with a huge id" 2
expect_in "names the file and the id" "tokenizer.json: token id 2147483000 is out of range" "$ERR"

# The same file with a sane id still loads (the limit leaves room for gaps).
sed -i 's/2147483000/60000/' tokenizer.json
run data preprocess --input in.txt --output_prefix out/hf --tokenizer_type HuggingFaceTokenizer \
  --tokenizer_model tokenizer.json
expect_rc "a tokenizer.json with a gap below its added token" 0

# events.jsonl with numbers no integer holds.
mkdir -p run/logs
cp "$PRIMUS_SRC/tests/fixtures/runs/success/metadata.json" run/
cat > run/events.jsonl <<'J'
{"step":1,"loss":5.5,"lr":0.001,"grad_norm":1.5,"tokens":128,"step_ms":3.5,"time":1795366448.1}
{"step":1e60,"loss":5.4,"time":1e300}
{"event":"restart","attempt":1e30,"step":-1e60,"time":-1e300}
{"event":"rollback","from_step":1e99,"to_step":-1e99,"cause":"fuzz"}
{"event":"fault","rank":1e40,"cause":"x","detail":"y","time":1e60}
J
run analyze logs run --no_dmesg
expect_rc "analyze logs over absurd numbers" 0
expect_in "a summary line" "run" "$OUT"
run analyze report run --output run.html
expect_rc "analyze report over absurd numbers" 0
expect_file "the report is written" run.html

finish
