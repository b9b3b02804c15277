#!/usr/bin/env bash
# valid_data_path / test_data_path (Megatron-LM's data per split): with
# train_data_path for training, the validation set is evaluated every
# eval_interval steps for eval_iters batches and the test set once after
# the last step, each from its own files (all of each, split unused). The
# losses logged in events.jsonl must equal `primus eval` of the saved
# checkpoints on the same text cut the old way (data_path + split 0,1,0),
# and differ from the training text's; a blend list is accepted; mixing
# data_path with them, a bad list, a missing file, mock data are checked.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=2
unset PRIMUS_FAULT_INJECT PRIMUS_RESTART PRIMUS_HEARTBEAT_DIR
PY=/usr/bin/python3

small_corpus "$T/corpus.txt"
head -40 corpus.txt | tr 'a-m' 'n-z' > valid.txt
sed -n 41,80p corpus.txt | tr 'a-z' 'A-Z' > test.txt
tiny_exp sd "data_path: null" "train_data_path: $T/corpus.txt" "valid_data_path: $T/valid.txt" \
  "test_data_path: [$T/test.txt]" "data_shuffle: false" "eval_iters: 2" "eval_interval: 4" \
  "save: $T/ck" "save_interval: 4"
run config validate --config sd.yaml
expect_rc "config validate" 0
run train pretrain --config sd.yaml
expect_rc "train with train/valid/test_data_path" 0
expect_in "the log names the validation data" "validation data (valid_data_path, all of it): $T/valid.txt" "$ERR"
expect_in "the log names the test data" "test data (test_data_path, all of it): $T/test.txt" "$ERR"
expect_in "the test set is evaluated after the last step" "test at step 8 | test loss" "$ERR"
EV=$(run_events sd)
n_eval=$(grep -c '"event":"eval"' <<<"$EV")
n_test=$(grep -c '"event":"test"' <<<"$EV")
expect_eq "validation at steps 4 and 8" "$n_eval" 2
expect_eq "one test evaluation" "$n_test" 1
ev_loss() { grep "\"event\":\"$1\",\"step\":$2," <<<"$EV" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
# eval_loss CKPT DATA: primus eval of a checkpoint on DATA's text as the
# validation split cut the old way.
eval_loss() {
  run eval --config sd.yaml --load "$1" --eval_iters 2 "data_path=$2" train_data_path=null \
    valid_data_path=null test_data_path=null split=0,1,0
  sed -n 's/.*"loss": *\([^,]*\),.*/\1/p' <<<"$OUT"
}
same() { "$PY" -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 1e-7 * abs(b) else 1)' "$1" "$2" 2>/dev/null; }
v4=$(ev_loss eval 4)
e4=$(eval_loss "$T/ck/iter_0000004" "$T/valid.txt")
if same "$v4" "$e4"; then ok "step 4's validation loss $v4 is valid.txt's ($e4)"; else bad "step 4 validation $v4 != eval of valid.txt $e4"; fi
t8=$(ev_loss test 8)
e8=$(eval_loss "$T/ck/iter_0000008" "$T/test.txt")
if same "$t8" "$e8"; then ok "the test loss $t8 is test.txt's ($e8)"; else bad "test loss $t8 != eval of test.txt $e8"; fi
c4=$(eval_loss "$T/ck/iter_0000004" "$T/corpus.txt")
if [[ -n $c4 ]] && ! same "$v4" "$c4"; then ok "and not the training text's ($c4)"; else bad "validation loss $v4 equals the training text's $c4"; fi
# primus eval reads valid_data_path itself.
run eval --config sd.yaml --load "$T/ck/iter_0000004" --eval_iters 2
e=$(sed -n 's/.*"loss": *\([^,]*\),.*/\1/p' <<<"$OUT")
if same "$v4" "$e"; then ok "primus eval reads valid_data_path"; else bad "primus eval with valid_data_path: $e, expected $v4"; fi

# A blend of two validation sets (shuffled samplers) runs.
tiny_exp blend "data_path: null" "train_data_path: $T/corpus.txt" \
  "valid_data_path: [1, $T/valid.txt, 3, $T/test.txt]" "eval_iters: 1" "eval_interval: 4"
run train pretrain --config blend.yaml
expect_rc "valid_data_path as a blend" 0
expect_eq "blend: validation at steps 4 and 8" "$(run_events blend | grep -c '"event":"eval"')" 2

# data_path cut by split does not mix with per-split paths (Megatron-LM).
run train pretrain --config sd.yaml "data_path=$T/corpus.txt"
expect_rc "data_path with valid_data_path" 2
expect_in "names the key and the rule" "valid_data_path: given with data_path" "$ERR"
run train pretrain --config sd.yaml "valid_data_path=[1, $T/valid.txt, 2]"
expect_rc "an odd blend list" 2
expect_in "says pairs" "valid_data_path: expected a dataset prefix or [weight, prefix" "$ERR"
run train pretrain --config sd.yaml "test_data_path=$T/missing" save=null
expect_rc "a missing test file" 2
expect_in "names the file" "$T/missing" "$ERR"
run train pretrain --config sd.yaml mock_data=true save=null train_iters=1
expect_rc "mock data" 0
expect_in "mock data: the paths are not read, said" "valid_data_path: not read with mock_data" "$ERR"

finish
