#!/usr/bin/env bash
# `primus analyze report RUN_DIR`: a tiny two-rank run with evaluations and
# checkpoints (so the eval curve, the per-rank step-time band and the
# checkpoint markers exist), its report.html self-contained (nothing loaded
# from the network), rendered by headless Chromium: the inline script ran,
# counted every chart and saw no error, and the screenshot is a real image.
# Then a run stripped of its series ("no data" charts), --output, and bad
# run directories (exit 2 naming the path). Chromium is required
# (scripts/deps.sh installs it): without it the test fails, it does not skip.
source "$(dirname "$0")/lib.sh"
cd "$T"
export OMP_NUM_THREADS=1 TZ=UTC
unset PRIMUS_FAULT_INJECT PRIMUS_RESTART PRIMUS_HEARTBEAT_DIR
CHARTS=6 # PRM_AN_REPORT_CHARTS: loss, lr, grad norm, tokens/s, MFU, step time

CHROME=${PRIMUS_CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
if [[ -z $CHROME || ! -x $CHROME ]]; then
  bad "headless Chromium is required to render the report (install it with scripts/deps.sh, or set PRIMUS_CHROMIUM)"
  finish
  exit 1
fi

# Every Chromium started here runs in its own process group; whatever is
# left of them goes at exit, with the temp folder.
_groups=()
_stop_chromes() {
  local g
  for g in "${_groups[@]}"; do kill -- "-$g" 2>/dev/null; done
}
trap '_stop_chromes; _cleanup' EXIT

# chrome OUT ARG...: headless Chromium (private profile, no network
# services, 60 s at most) with stdout in OUT and stderr in OUT.err.
chrome() {
  local out=$1 prof
  shift
  prof=$(mktemp -d "$T/chrome-profile-XXXXXX")
  setsid timeout -k 5 60 "$CHROME" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$prof" \
    "$@" >"$out" 2>"$out.err" &
  local pid=$!
  _groups+=("$pid")
  wait "$pid"
  local rc=$?
  kill -- "-$pid" 2>/dev/null
  return $rc
}

# ---- a tiny run: 2 ranks, 12 steps, eval every 4, checkpoints at 6 and 12 ----
small_corpus corpus.txt
tiny_exp rep "train_iters: 12" "eval_iters: 1" "eval_interval: 4" "save: $T/ckpt" "save_interval: 6"
run direct --nproc 2 -- train pretrain --config rep.yaml
expect_rc "two-rank tiny run" 0
RD=$(newest_run rep)
EV=$(cat "$RD/events.jsonl" 2>/dev/null)
expect_in "run has eval events" '"event":"eval"' "$EV"
expect_in "run has checkpoint events" '"event":"checkpoint"' "$EV"

run analyze report "$RD"
expect_rc "analyze report" 0
expect_in "says where it wrote" "written: $RD/report.html ($CHARTS of $CHARTS charts with data)" "$OUT"
H=$RD/report.html
expect_file "report.html in the run directory" "$H"
expect_eq "no temporary left" "$(ls "$RD" | grep -c tmp)" 0
HTML=$(cat "$H" 2>/dev/null)

# ---- self-contained: nothing to fetch ----
for pat in 'http://' 'https://' '<script src' 'src=' '<link' '@import'; do
  expect_not_in "no $pat in the page" "$pat" "$HTML"
done
expect_eq "url() only for in-page references (#clip-...)" "$(grep -o 'url([^#]' "$H" | wc -l)" 0
expect_eq "$CHARTS charts in the page" "$(grep -o '<svg class="chart"' "$H" | wc -l)" "$CHARTS"
expect_eq "every chart has data" "$(grep -o 'data-points="0"' "$H" | wc -l)" 0
expect_in "the diagnosis line at the top" "SUCCEEDED: exit code 0, 12 steps, no faults" "$HTML"
expect_in "checkpoint markers" 'class="marker mk-checkpoint"' "$HTML"
expect_in "checkpoint labels" '>ckpt 12</text>' "$HTML"
expect_in "eval points" 'eval at step 8: ' "$HTML"
expect_in "per-rank band on the step time" 'class="band" d="M' "$HTML"
expect_in "config table: the model" '<th>model</th><td>llama_tiny.yaml</td>' "$HTML"
expect_in "config table: global batch" '<th>global batch</th><td>4</td>' "$HTML"
expect_in "goodput from metadata.json" '<div class="k">goodput</div><div class="v">' "$HTML"
expect_not_in "goodput known" '<div class="k">goodput</div><div class="v">no data' "$HTML"
LAST_LOSS=$(grep '^{"step":12,' "$RD/events.jsonl" | sed 's/.*"loss":\([^,]*\),.*/\1/')
WANT=$(awk -v l="$LAST_LOSS" 'BEGIN { printf "%.4f", l }')
expect_in "final train loss is the last step's ($WANT)" "<div class=\"k\">final train loss</div><div class=\"v\">$WANT</div>" "$HTML"

# ---- rendered by Chromium ----
if chrome "$T/dom.html" --dump-dom "file://$H"; then ok "chromium --dump-dom"; else bad "chromium --dump-dom failed: $(tail -3 "$T/dom.html.err")"; fi
DOM=$(cat "$T/dom.html")
expect_in "the inline script counted every chart, no error" "charts=$CHARTS with_data=$CHARTS errors=0" "$DOM"
expect_in "body attribute set by the script" "data-charts=\"$CHARTS\"" "$DOM"
if chrome "$T/shot.out" --screenshot="$T/report.png" --window-size=1280,2000 "file://$H"; then
  ok "chromium --screenshot"
else
  bad "chromium --screenshot failed: $(tail -3 "$T/shot.out.err")"
fi
expect_file "screenshot written" "$T/report.png"
PNG=$(python3 - "$T/report.png" <<'P'
import struct, sys
d = open(sys.argv[1], "rb").read()
ok = d[:8] == b"\x89PNG\r\n\x1a\n"
w, h = struct.unpack(">II", d[16:24]) if ok else (0, 0)
print(ok, w, h, len(d) > 50000)
P
)
expect_eq "screenshot: a 1280x2000 PNG of some substance (>50 KB)" "$PNG" "True 1280 2000 True"

# ---- the layout fixes: the command line, labels, evals in the events ----
expect_in "the command line in its own wrapping block" '<code class="cmd" id="command">' "$HTML"
expect_not_in "no break-all (the command wraps at spaces)" 'break-all' "$HTML"
LABEL_Y=$(grep -o 'class="mklabel" x="[0-9.]*" y="[0-9.]*"' "$H" | sed 's/.*y="\([0-9.]*\)"/\1/' | sort -un | tr '\n' ' ')
if [[ -n $LABEL_Y ]] && awk -v ys="$LABEL_Y" 'BEGIN { n = split(ys, y, " "); for (i = 1; i <= n; i++) if (y[i] >= 77) exit 1 }'; then
  ok "marker labels above the plot (rows at y $LABEL_Y)"
else
  bad "marker labels inside the plot or missing: y $LABEL_Y"
fi
expect_eq "the evaluations in the events table" "$(grep -o '<tr class="eval">' "$H" | wc -l)" "$(grep -c '"event":"eval"' "$RD/events.jsonl")"
expect_in "with their loss" '<td style="color:#d62728">eval</td>' "$HTML"
expect_in "MFU plotted" 'id="chart-mfu" data-points="' "$HTML"
expect_not_in "MFU has points" 'id="chart-mfu" data-points="0"' "$HTML"

# ---- an evaluation run: its results, not six empty charts ----
run eval --config rep.yaml --load "$T/ckpt"
expect_rc "primus eval of the run's checkpoint" 0
ERD=$(newest_run rep)
expect_in "the eval run recorded its result" '"event":"eval","split":"valid","loss":' "$(cat "$ERD/events.jsonl" 2>/dev/null)"
run analyze report "$ERD" --output "$T/eval.html"
expect_rc "report of an evaluation run" 0
expect_in "says what it wrote" "written: $T/eval.html (an evaluation run: its results, no training charts)" "$OUT"
EH=$(cat "$T/eval.html")
expect_eq "no charts" "$(grep -o '<svg class="chart"' "$T/eval.html" | wc -l)" 0
expect_in "the results table" '<h2>Evaluation</h2>' "$EH"
expect_in "the valid loss card" '<div class="k">valid loss</div><div class="v">' "$EH"
chrome "$T/eval-dom.html" --dump-dom "file://$T/eval.html"
expect_in "rendered: no charts, no error" "charts=0 with_data=0 errors=0" "$(cat "$T/eval-dom.html")"

# ---- a run without series: every chart says "no data" ----
mkdir -p "$T/bare"
cp "$RD/metadata.json" "$T/bare/"
grep '"event":"checkpoint"' "$RD/events.jsonl" > "$T/bare/events.jsonl"
run analyze report "$T/bare" --output "$T/bare.html"
expect_rc "report of a run without step lines" 0
expect_in "--output honoured" "written: $T/bare.html (0 of $CHARTS charts with data)" "$OUT"
expect_file "--output file" "$T/bare.html"
expect_eq "no report.html when --output is given" "$(ls "$T/bare" | grep -c report)" 0
expect_eq "every chart says no data" "$(grep -o '>no data</text>' "$T/bare.html" | wc -l)" "$CHARTS"
expect_in "events without series" '<td>checkpoint at step 12 saved in' "$(cat "$T/bare.html")"
chrome "$T/bare-dom.html" --dump-dom "file://$T/bare.html"
expect_in "rendered: all charts, none with data, no error" "charts=$CHARTS with_data=0 errors=0" "$(cat "$T/bare-dom.html")"

# ---- hostile strings in the config are escaped ----
mkdir -p "$T/bare/config"
printf 'exp_name: x<script>alert(1)</script>&"q"\nmodules:\n  pre_trainer:\n    model: a&b.yaml\n' > "$T/bare/config/resolved.yaml"
run analyze report "$T/bare" -o "$T/esc.html"
expect_rc "report with a hostile config" 0
expect_in "exp_name escaped" 'x&lt;script&gt;alert(1)&lt;/script&gt;&amp;&quot;q&quot;' "$(cat "$T/esc.html")"
expect_not_in "no injected script" '<script>alert' "$(cat "$T/esc.html")"
expect_in "model escaped" '<td>a&amp;b.yaml</td>' "$(cat "$T/esc.html")"

# ---- bad input ----
run analyze report "$T/no-such-run"
expect_rc "missing run dir" 2
expect_in "names the path" "$T/no-such-run" "$ERR"
mkdir -p "$T/empty"
run analyze report "$T/empty"
expect_rc "not a run dir" 2
expect_in "says what it expected" "$T/empty: not a run directory (expected metadata.json, events.jsonl or logs/" "$ERR"
run analyze report
expect_rc "no RUN_DIR" 2
run analyze report "$RD" --output "$T/no/such/dir/r.html"
expect_rc "unwritable --output" 3
expect_in "names the output path" "$T/no/such/dir/r.html" "$ERR"

# ---- help ----
run analyze report --help
expect_in "help names the default file" "RUN_DIR/report.html" "$OUT"
run analyze --help
expect_in "analyze lists report" "report" "$OUT"
finish
