#!/usr/bin/env bash
# Experiment configs through the CLI: show with origins, overrides in every
# form, and bad input named by file and line.
source "$(dirname "$0")/lib.sh"

EX=$PRIMUS_SRC/configs/examples/llama_tiny-pretrain.yaml
run config show --config "$EX"
expect_rc "config show" 0
expect_in "origins point at the preset" "llama_tiny.yaml:" "$OUT"
expect_in "hidden_size resolved" "hidden_size:" "$OUT"

run config show --config "$EX" lr=0.125 --min-lr 0.0625 --seed=7 --no-origins
expect_rc "overrides in three forms" 0
expect_in "key=value" "lr: 0.125" "$OUT"
expect_in "--key value with dashes" "min_lr: 0.0625" "$OUT"
expect_in "--key=value" "seed: 7" "$OUT"
run config show --config "$EX" lr=0.125
expect_in "CLI origin" "<cli>" "$OUT"

run config show --config "$EX" lr=fast
expect_rc "bad type" 2
expect_in "bad type explained" 'lr: expected a number, got "fast"' "$ERR"

run config show --config "$EX" hiden_size=3
expect_rc "unknown override key" 2
expect_in "override suggestion" 'did you mean "hidden_size"' "$ERR"

mkdir -p "$T/c"
cat > "$T/c/typo.yaml" <<Y
exp_name: typo
modules:
  pre_trainer:
    framework: native
    config: pre_trainer.yaml
    model: llama_tiny.yaml
    overrides:
      num_layer: 2
Y
run config show --config "$T/c/typo.yaml"
expect_rc "unknown key in file" 2
expect_in "file:line named" "typo.yaml:8" "$ERR"
expect_in "did you mean num_layers" 'did you mean "num_layers"' "$ERR"

printf 'exp_name: x\nmodules:\n  pre_trainer: [unclosed\n' > "$T/c/broken.yaml"
run config show --config "$T/c/broken.yaml"
expect_rc "malformed YAML" 2
expect_in "malformed YAML names the file" "broken.yaml:" "$ERR"

run config show --config "$T/c/missing.yaml"
expect_rc "missing file" 2
expect_in "missing file named" "missing.yaml" "$ERR"

run config show
expect_rc "config required" 2

# A value with shell syntax stays one value.
cat > "$T/c/inj.yaml" <<Y
exp_name: inj
modules:
  pre_trainer:
    framework: native
    config: pre_trainer.yaml
    model: llama_tiny.yaml
    overrides:
      data_path: "x; rm -rf ~"
Y
run config show --config "$T/c/inj.yaml" --no-origins
expect_rc "shell syntax in a value" 0
expect_in "value kept verbatim" "x; rm -rf ~" "$OUT"

# ${VAR} and ${VAR:default}
cat > "$T/c/vars.yaml" <<'Y'
exp_name: vars
modules:
  pre_trainer:
    framework: native
    config: pre_trainer.yaml
    model: llama_tiny.yaml
    overrides:
      lr: ${MY_LR:0.5}
      seed: ${MY_SEED}
Y
MY_SEED=11 run config show --config "$T/c/vars.yaml" --no-origins
expect_rc "env expansion" 0
expect_in "default used" "lr: 0.5" "$OUT"
expect_in "required var used" "seed: 11" "$OUT"
unset MY_SEED
run config show --config "$T/c/vars.yaml"
expect_rc "required var missing" 2
expect_in "missing var named" "MY_SEED" "$ERR"

run config validate --config "$PRIMUS_SRC/configs/examples/llama3_8B-pretrain.yaml"
expect_rc "validate a real shape" 0
expect_in "validate reports size" "8.030B" "$OUT"
# What a run would meet that the schema cannot see: tokenizer, data, load.
run config validate --config "$PRIMUS_SRC/configs/examples/llama_tiny-pretrain.yaml" \
  data_path="$T/no-data" load="$T/no-ckpt" tokenizer_type=HuggingFaceTokenizer tokenizer_model="$T/no-tok.json"
expect_rc "validate: missing files are errors" 2
expect_in "validate: counts them" "the keys are valid, but a run would stop at 3 problems" "$ERR"
expect_in "validate: the tokenizer" "no-tok.json" "$ERR"
expect_in "validate: the data" "<cli>: data_path: $T/no-data: no such file, nor an indexed dataset" "$ERR"
expect_in "validate: load" "<cli>: load: $T/no-ckpt: no such folder" "$ERR"
echo "some text" > "$T/data.txt"
run config validate --config "$PRIMUS_SRC/configs/examples/llama_tiny-pretrain.yaml" data_path="$T/data.txt"
expect_rc "validate: a plain text file is data" 0

# docs/config.md's "Module keys" table: each key's default is the value the
# module preset (configs/modules/native/pre_trainer.yaml) gives it, as
# `config show` resolves it (numbers compared as numbers). Keys a model
# preset sets are left out; at least 70 keys must be compared.
cat > "$T/c/bare.yaml" <<Y
exp_name: bare
modules:
  pre_trainer:
    framework: native
    config: pre_trainer.yaml
    model: llama_tiny.yaml
Y
run config show --config "$T/c/bare.yaml"
expect_rc "config show for the defaults" 0
if /usr/bin/python3 - "$PRIMUS_SRC/docs/config.md" "$OUT" >"$T/defaults.log" 2>&1 <<'PYEOF'; then
import re, sys
doc, show = open(sys.argv[1]).read(), sys.argv[2].splitlines()
vals, stack, base = {}, [], None
for ln in show:
    if base is None:
        if re.match(r"^\s+overrides:\s*$", ln):
            base = len(ln) - len(ln.lstrip()) + 2
        continue
    m = re.match(r"^(\s*)([A-Za-z0-9_]+):\s*(.*?)\s*(?:#\s*(.*))?$", ln)
    if not m or len(m.group(1)) < base:
        break
    depth = (len(m.group(1)) - base) // 2
    stack = stack[:depth] + [m.group(2)]
    if m.group(3):
        vals[".".join(stack)] = (m.group(3), m.group(4) or "")
def norm(v):
    v = v.strip().strip('"').strip("'")
    try:
        return repr(float(v))
    except ValueError:
        return v
n = bad = 0
for m in re.finditer(r"^\| `([^`]+)` \| [^|]* \| [^|]* \| `([^`]*)` \|", doc, re.M):
    k, d = m.group(1), m.group(2)
    if k not in vals or "modules/native/pre_trainer.yaml" not in vals[k][1]:
        continue
    n += 1
    if norm(d) != norm(vals[k][0]):
        bad += 1
        print("%s: docs/config.md says %s, the preset (%s) %s" % (k, d, vals[k][1], vals[k][0]))
print("%d keys compared, %d differ" % (n, bad))
sys.exit(0 if n >= 70 and bad == 0 else 1)
PYEOF
  ok "docs/config.md's defaults are the module preset's ($(tail -1 "$T/defaults.log"))"
else
  bad "docs/config.md's defaults differ from the module preset: $(cat "$T/defaults.log")"
fi

finish
