#!/usr/bin/env bash
# Blended, shuffled data end to end through the real binary: a two-dataset
# data_path [weight, path, ...] with data_shuffle trains (exit 0), the
# sample-index caches appear next to the data, the same seed reproduces the
# losses exactly (from the cache) and another seed changes them; a bad list
# is refused naming the key.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=2

corpus() { # SEED WORDS... > file
  local seed=$1; shift
  awk -v seed="$seed" -v words="$*" 'BEGIN { srand(seed); n = split(words, w, " ");
    for (p = 0; p < 60; p++) { s = ""; m = 3 + int(rand() * 4);
      for (i = 0; i < m; i++) { k = 4 + int(rand() * 8); line = "";
        for (j = 0; j < k; j++) line = line (j ? " " : "") w[1 + int(rand() * n)];
        s = s line ". " }
      print s; print "" } }'
}
mkdir -p "$T/data"
corpus 7 the a jury said grand county election was to of and > "$T/data/a.txt"
corpus 11 in that for it on by city river stone bright quiet > "$T/data/b.txt"

exp() { # NAME SEED DATA_PATH [SHUFFLE]
  { exp_header "$1"; tiny_model; cat <<Y
      data_path: $3
      split: "90,10,0"
      data_shuffle: ${4:-true}
      seed: $2
      micro_batch_size: 4
      global_batch_size: 8
      train_iters: 3
      lr: 3.0e-3
      log_interval: 1
      eval_interval: 3
      eval_iters: 1
      save: null
Y
  } > "$T/$1.yaml"
}
losses() { grep '"step"' "$1" | grep -v '"event"' | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
events() { echo "$(ls -d "$T"/ws/team/tester/"$1"/run-* | tail -1)/events.jsonl"; }

BLEND="[0.7, $T/data/a.txt, 0.3, $T/data/b.txt]"
exp one 1234 "$BLEND"
run train pretrain --config "$T/one.yaml"
expect_rc "blended shuffled run" 0
expect_in "the log names the blend" "blend of 2 datasets" "$ERR"
expect_not_in "no 'not implemented' warning" "not implemented yet; sequences" "$ERR"
expect_file "train sample index cached next to dataset a" "$T/data/a.txt.train-s32-seed1234.sidx"
expect_file "valid sample index cached next to dataset b" "$T/data/b.txt.valid-s32-seed1234.sidx"
L1=$(losses "$(events one)")
expect_eq "three steps logged" "$(echo "$L1" | wc -l)" 3

exp two 1234 "$BLEND"
run train pretrain --config "$T/two.yaml"
expect_rc "same seed again (from the cache)" 0
L2=$(losses "$(events two)")
expect_eq "same seed, same losses" "$L1" "$L2"

exp three 99 "$BLEND"
run train pretrain --config "$T/three.yaml"
expect_rc "another seed" 0
L3=$(losses "$(events three)")
if [[ -n $L3 && $L1 != "$L3" ]]; then ok "another seed, other losses"; else bad "seed 99 gave the same losses: $L3"; fi

# One dataset in order: the sequential reader, no sample index; a blend in
# order trains too.
mkdir -p "$T/plain"
cp "$T/data/a.txt" "$T/plain/a.txt"
exp seq 1234 "$T/plain/a.txt" false
run train pretrain --config "$T/seq.yaml"
expect_rc "one dataset in order" 0
expect_eq "no sample index for in-order data" "$(ls "$T/plain")" "a.txt"
exp bseq 1234 "[1, $T/plain/a.txt, 1, $T/data/b.txt]" false
run train pretrain --config "$T/bseq.yaml"
expect_rc "blend in order" 0
expect_in "the log says in order" "samples in order" "$ERR"

exp bad 1 "[0.7, $T/data/a.txt, 0.3]"
run train pretrain --config "$T/bad.yaml"
expect_rc "odd-length list" 2
expect_in "names data_path" "data_path" "$ERR"
exp neg 1 "[-1, $T/data/a.txt, 1, $T/data/b.txt]"
run train pretrain --config "$T/neg.yaml"
expect_rc "negative weight" 2
expect_in "says weight" "weight" "$ERR"

finish
