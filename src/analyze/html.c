/* html.c - `primus analyze report`: one self-contained HTML page per run
 * (inline CSS, inline SVG charts drawn here, a few lines of inline script
 * that only count the charts; nothing is loaded from elsewhere, so the page
 * works offline, without JavaScript, and in an archive). The charts share
 * the step axis: loss (train and eval), learning rate, gradient norm,
 * tokens/s, MFU and step time with the per-rank spread; checkpoints,
 * restarts, faults and alerts are vertical lines on every chart. */
#define _GNU_SOURCE
#include "analyze-impl.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Tables                                                                    */
/* ------------------------------------------------------------------------ */

static void prm__an_row(prm_sb_t *out, const char *key, const char *val) {
  prm_sb_append(out, "<tr><th>");
  prm_an_html_escape(out, key);
  prm_sb_append(out, "</th><td>");
  prm_an_html_escape(out, val && *val ? val : "-");
  prm_sb_append(out, "</td></tr>\n");
}

/* The first "key: value" line of a YAML text, at any depth; 0 when the key
 * is absent or null. Good enough for config/resolved.yaml, which primus
 * writes one key per line. */
static int prm__an_yaml(const char *text, const char *key, char *buf, size_t n) {
  size_t kl = strlen(key);
  for (const char *p = text ? text : ""; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    const char *q = p;
    while (q < p + len && *q == ' ') q++;
    if ((size_t)(p + len - q) > kl && !strncmp(q, key, kl) && q[kl] == ':') {
      const char *v = q + kl + 1, *e = p + len;
      while (v < e && (*v == ' ' || *v == '\t')) v++;
      for (const char *h = v; h < e; h++)
        if (*h == '#' && h > v && h[-1] == ' ' && *v != '"' && *v != '\'') {
          e = h;
          break;
        }
      while (e > v && (e[-1] == ' ' || e[-1] == '\r')) e--;
      size_t m = (size_t)(e - v) < n - 1 ? (size_t)(e - v) : n - 1;
      memcpy(buf, v, m);
      buf[m] = 0;
      return m && strcmp(buf, "null") && strcmp(buf, "~");
    }
    p += len + (nl ? 1 : 0);
  }
  return 0;
}

static const char *prm__an_jstr(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int prm__an_jnum(const cJSON *o, const char *key, double *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(v)) return 0;
  *out = v->valuedouble;
  return 1;
}

/* The last finite value of a series. */
static int prm__an_last(const prm_an_series_t *s, double *v) {
  for (int k = s->n - 1; k >= 0; k--)
    if (isfinite(s->y[k])) {
      *v = s->y[k];
      return 1;
    }
  return 0;
}

/* Tokens per second over all steps but the first (warm-up, when there are
 * others): the tokens over the time. */
static int prm__an_mean_tps(const prm_an_runseries_t *rs, double *v) {
  const prm_an_series_t *t = &rs->s[PRM_AN_SER_TOKENS_S], *ms = &rs->s[PRM_AN_SER_STEP_MS];
  double tok = 0, sec = 0;
  for (int pass = 0; pass < 2 && sec <= 0; pass++)
    for (int k = 0; k < t->n && k < ms->n; k++) {
      if (pass == 0 && t->x[k] <= 1 && t->n > 1) continue;
      if (!isfinite(t->y[k]) || !isfinite(ms->y[k]) || ms->y[k] <= 0) continue;
      tok += t->y[k] * ms->y[k] / 1e3;
      sec += ms->y[k] / 1e3;
    }
  if (sec <= 0) return 0;
  *v = tok / sec;
  return 1;
}

static int prm__an_mean(const prm_an_series_t *s, double *v) {
  double sum = 0;
  int n = 0;
  for (int pass = 0; pass < 2 && !n; pass++)
    for (int k = 0; k < s->n; k++) {
      if (pass == 0 && s->x[k] <= 1 && s->n > 1) continue;
      if (isfinite(s->y[k])) sum += s->y[k], n++;
    }
  if (!n) return 0;
  *v = sum / n;
  return 1;
}

static void prm__an_card(prm_sb_t *out, const char *name, const char *value, const char *note) {
  prm_sb_append(out, "<div class=\"card\"><div class=\"k\">");
  prm_an_html_escape(out, name);
  prm_sb_append(out, "</div><div class=\"v\">");
  prm_an_html_escape(out, value);
  prm_sb_append(out, "</div><div class=\"n\">");
  prm_an_html_escape(out, note ? note : "");
  prm_sb_append(out, "</div></div>\n");
}

static const char prm__an_css[] =
    ":root{--fg:#1d2330;--muted:#5f6b7a;--line:#e3e7ee;--bg:#f6f7f9;--card:#fff}"
    "*{box-sizing:border-box}"
    "body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,'Segoe UI',"
    "Roboto,Helvetica,Arial,sans-serif}"
    "main{max-width:1400px;margin:0 auto;padding:20px 24px 40px}"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 10px}"
    ".sub{color:var(--muted);overflow-wrap:anywhere}"
    /* The command line wraps at its spaces; a single word longer than the
     * line (a long path) breaks only where it must. */
    ".cmd{display:block;white-space:pre-wrap;word-break:normal;overflow-wrap:break-word;"
    "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}"
    ".diag{margin:14px 0;padding:10px 14px;border-radius:8px;border-left:5px solid #888;background:#fff;"
    "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13px}"
    ".diag.succeeded{border-color:#2e7d32}.diag.recovered{border-color:#ef6c00}.diag.failed{border-color:#c62828}"
    ".cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(160px,1fr));gap:10px}"
    ".card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 12px}"
    ".card .k{color:var(--muted);font-size:12px}.card .v{font-size:19px;font-weight:600}"
    ".card .n{color:var(--muted);font-size:11px}"
    ".charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(460px,1fr));gap:14px}"
    ".charts figure{margin:0;background:var(--card);border:1px solid var(--line);border-radius:8px;padding:6px}"
    "svg.chart{display:block;width:100%;height:auto;font-family:inherit}"
    "svg .title{font-size:14px;font-weight:600;fill:#1d2330}"
    "svg .frame{fill:#fff;stroke:#cfd6e0}svg .grid{stroke:#eef1f5}svg .axis{stroke:#8c96a5}"
    "svg .tick{font-size:11px;fill:#5f6b7a}svg .axis-label{font-size:11px;fill:#5f6b7a}"
    "svg .line{fill:none;stroke-width:1.8;stroke-linejoin:round;stroke-linecap:round}"
    "svg .band{fill:#ff7f0e;fill-opacity:.22;stroke:none}"
    "svg .mkline{stroke-width:1.2;stroke-dasharray:4 3;opacity:.85}svg .mktick{stroke-width:.8;opacity:.6}"
    "svg .mklabel{font-size:10px}"
    "svg .legend-text{font-size:11px;fill:#1d2330}svg .note{font-size:11px;fill:#c62828}"
    "svg .nodata{font-size:18px;fill:#9aa4b2;font-weight:600}svg .nodata-why{font-size:11px;fill:#9aa4b2}"
    ".mklegend{display:flex;flex-wrap:wrap;gap:14px;margin:0 0 10px;color:var(--muted);font-size:12px}"
    ".mklegend span::before{content:'';display:inline-block;width:16px;height:0;border-top:2px dashed "
    "var(--c);margin-right:5px;vertical-align:middle}"
    ".tables{display:grid;grid-template-columns:repeat(auto-fit,minmax(380px,1fr));gap:14px;align-items:start}"
    "table{border-collapse:collapse;width:100%;background:var(--card);border:1px solid var(--line);"
    "border-radius:8px;overflow:hidden}"
    "th,td{text-align:left;padding:5px 10px;border-bottom:1px solid var(--line);vertical-align:top;"
    "word-break:break-word}"
    "th{color:var(--muted);font-weight:500;width:38%}caption{text-align:left;font-weight:600;padding:4px 0}"
    "table.events th{width:auto}"
    "footer{margin-top:28px;color:var(--muted);font-size:12px}";

/* Counts the charts the browser laid out and any script error; the page
 * is complete without it. */
static const char prm__an_js[] =
    "window.prmReport={errors:0};"
    "window.addEventListener('error',function(){window.prmReport.errors++;});"
    "window.addEventListener('load',function(){"
    "var c=document.querySelectorAll('svg.chart'),drawn=0,data=0;"
    "for(var i=0;i<c.length;i++){var r=c[i].getBoundingClientRect();"
    "if(r.width>0&&r.height>0&&c[i].querySelector('.frame'))drawn++;"
    "if(c[i].getAttribute('data-points')!=='0')data++;}"
    "var s=document.getElementById('status');"
    "s.textContent='charts='+drawn+' with_data='+data+' errors='+window.prmReport.errors;"
    "document.body.setAttribute('data-charts',String(drawn));"
    "document.body.setAttribute('data-errors',String(window.prmReport.errors));});";

/* ------------------------------------------------------------------------ */
/* The page                                                                  */
/* ------------------------------------------------------------------------ */

static void prm__an_fmt(char *buf, size_t n, const char *fmt, double v) { snprintf(buf, n, fmt, v); }

char *prm_an_report_html(const prm_an_report_in_t *in, int *with_data) {
  const prm_an_runseries_t *rs = in->rs;
  cJSON *meta = in->metadata ? cJSON_Parse(in->metadata) : NULL;
  cJSON *plat = in->platform ? cJSON_Parse(in->platform) : NULL;
  prm_sb_t o = {0};
  char v[160], note[160];
  double x;

  prm_sb_append(&o, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                    "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
                    "<title>primus report: ");
  char exp[128] = "";
  if (!prm__an_yaml(in->resolved, "exp_name", exp, sizeof exp))
    snprintf(exp, sizeof exp, "%s", prm_path_basename(in->run_dir ? in->run_dir : "run"));
  prm_an_html_escape(&o, exp);
  prm_sb_appendf(&o, "</title><style>%s</style><script>%s</script></head>\n<body><main>\n", prm__an_css,
                 prm__an_js);
  prm_sb_append(&o, "<h1>Run report: ");
  prm_an_html_escape(&o, exp);
  prm_sb_append(&o, "</h1><div class=\"sub\">");
  prm_an_html_escape(&o, in->run_dir);
  const char *cmd = prm__an_jstr(meta, "command_line");
  if (cmd) {
    prm_sb_append(&o, "<code class=\"cmd\" id=\"command\">");
    prm_an_html_escape(&o, cmd);
    prm_sb_append(&o, "</code>");
  }
  prm_sb_append(&o, "</div>\n");
  prm_sb_appendf(&o, "<div class=\"diag %s\" id=\"diagnosis\">", in->outcome ? in->outcome : "unknown");
  prm_an_html_escape(&o, in->summary ? in->summary : "no diagnosis");
  prm_sb_append(&o, "</div>\n");

  /* Key figures: an evaluation run's results, or the training's. */
  const cJSON *gp = cJSON_GetObjectItemCaseSensitive(meta, "goodput");
  int eval_only = rs->n_steps == 0 && rs->n_ev > 0;
  prm_sb_append(&o, "<div class=\"cards\" id=\"summary\">\n");
  const prm_an_eval_t *last_ev = NULL;
  for (int k = rs->n_ev - 1; k >= 0 && !last_ev; k--)
    if (isfinite(rs->ev[k].loss)) last_ev = &rs->ev[k];
  if (eval_only) {
    prm__an_fmt(v, sizeof v, "%.4f", last_ev ? last_ev->loss : NAN);
    prm__an_card(&o, "valid loss", last_ev ? v : "no data", rs->n_ev > 1 ? "the last evaluation" : NULL);
    prm__an_fmt(v, sizeof v, "%.3f", last_ev ? last_ev->perplexity : NAN);
    prm__an_card(&o, "perplexity", last_ev && isfinite(last_ev->perplexity) ? v : "no data", NULL);
    snprintf(v, sizeof v, "%lld", last_ev ? (long long)last_ev->tokens : -1LL);
    prm__an_card(&o, "tokens evaluated", last_ev && last_ev->tokens >= 0 ? v : "no data", NULL);
  } else {
  snprintf(v, sizeof v, "%lld", (long long)rs->last_step);
  snprintf(note, sizeof note, "%lld step lines%s", (long long)rs->n_steps,
           rs->skipped ? ", some skipped" : "");
  prm__an_card(&o, "steps", rs->n_steps ? v : "no data", note);
  if (prm__an_last(&rs->s[PRM_AN_SER_LOSS], &x)) prm__an_fmt(v, sizeof v, "%.4f", x);
  else snprintf(v, sizeof v, "no data");
  prm__an_card(&o, "final train loss", v, NULL);
  if (last_ev) prm__an_fmt(v, sizeof v, "%.4f", last_ev->loss);
  else snprintf(v, sizeof v, "no data");
  prm__an_card(&o, "final eval loss", v, NULL);
  if (prm__an_mean_tps(rs, &x)) prm__an_fmt(v, sizeof v, "%.0f", x);
  else snprintf(v, sizeof v, "no data");
  prm__an_card(&o, "mean tokens/s", v, "tokens / step time, after the first step");
  if (prm__an_mean(&rs->s[PRM_AN_SER_MFU], &x)) prm__an_fmt(v, sizeof v, "%.1f%%", x);
  else snprintf(v, sizeof v, "no data");
  prm__an_card(&o, "mean MFU", v, "logged steps, after the first");
  if (prm__an_jnum(gp, "goodput", &x)) prm__an_fmt(v, sizeof v, "%.1f%%", 100 * x);
  else snprintf(v, sizeof v, "no data");
  prm__an_card(&o, "goodput", v, "productive step time / wall time");
  } /* training */
  if (prm__an_jnum(meta, "exit_code", &x)) snprintf(v, sizeof v, "%d", (int)x);
  else snprintf(v, sizeof v, "unknown");
  prm__an_card(&o, "exit status", v, in->outcome);
  if (prm__an_jnum(meta, "duration_s", &x)) prm__an_fmt(v, sizeof v, "%.1f s", x);
  else snprintf(v, sizeof v, "unknown");
  prm__an_card(&o, "wall time", v, NULL);
  prm_sb_append(&o, "</div>\n");

  /* An evaluation run (`primus eval`: eval events, no step lines): its
   * results instead of charts with nothing to draw. */
  if (eval_only) {
    prm_sb_append(&o, "<h2>Evaluation</h2>\n<table class=\"events\" id=\"evals\"><tr><th>step</th>"
                      "<th>valid loss</th><th>perplexity</th><th>tokens</th><th>time</th></tr>\n");
    for (int k = 0; k < rs->n_ev; k++) {
      const prm_an_eval_t *e = &rs->ev[k];
      char st[24] = "-", lo[32] = "-", pp[32] = "-", tk[24] = "-", when[32] = "-";
      if (e->step >= 0) snprintf(st, sizeof st, "%lld", (long long)e->step);
      if (isfinite(e->loss)) snprintf(lo, sizeof lo, "%.4f", e->loss);
      if (isfinite(e->perplexity)) snprintf(pp, sizeof pp, "%.3f", e->perplexity);
      if (e->tokens >= 0) snprintf(tk, sizeof tk, "%lld", (long long)e->tokens);
      if (e->time > 0) prm_time_format(when, sizeof when, "%Y-%m-%d %H:%M:%S", e->time);
      prm_sb_appendf(&o, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n", st, lo, pp,
                     tk, when);
    }
    prm_sb_append(&o, "</table>\n<p class=\"sub\">An evaluation run: no training steps, so no training "
                      "curves.</p>\n");
    if (with_data) *with_data = -1;
  }

  /* Charts. */
  if (!eval_only) {
  prm_sb_append(&o, "<h2>Training curves</h2>\n<div class=\"mklegend\">");
  int kinds[PRM_AN__MARKERS] = {0};
  for (int k = 0; k < rs->n_mk; k++) kinds[rs->mk[k].kind]++;
  int any_mk = 0;
  for (int k = 0; k < PRM_AN__MARKERS; k++) {
    if (!kinds[k]) continue;
    prm_sb_appendf(&o, "<span style=\"--c:%s\">%s (%d)</span>", prm__an_mk_colors[k],
                   prm_an_marker_name((prm_an_marker_kind_t)k), kinds[k]);
    any_mk = 1;
  }
  if (!any_mk) prm_sb_append(&o, "<span style=\"--c:#bbb\">no checkpoints, restarts, faults or alerts</span>");
  prm_sb_append(&o, "</div>\n<div class=\"charts\">\n");
  const prm_an_series_t *S = rs->s;
  int multi = rs->rank_logs > 1 && S[PRM_AN_SER_STEP_MIN].n > 0;
  const prm__an_chart_t charts[PRM_AN_REPORT_CHARTS] = {
      {"loss", "Loss", "loss", "no step lines or eval events in events.jsonl",
       {{"train", &S[PRM_AN_SER_LOSS], "#1f77b4", 0}, {"eval", &S[PRM_AN_SER_EVAL_LOSS], "#d62728", 1}}, 2,
       NULL, NULL, NULL, 0, 0, "%.4f"},
      {"lr", "Learning rate", "lr", "no step lines in events.jsonl", {{"lr", &S[PRM_AN_SER_LR], "#9467bd", 0}},
       1, NULL, NULL, NULL, 1, 0, "%.3g"},
      {"grad_norm", "Gradient norm", "grad norm", "no step lines in events.jsonl",
       {{"grad norm", &S[PRM_AN_SER_GRAD_NORM], "#2ca02c", 0}}, 1, NULL, NULL, NULL, 0, 0, "%.3f"},
      {"tokens_s", "Throughput", "tokens/s", "no step lines with step_ms in events.jsonl",
       {{"tokens/s", &S[PRM_AN_SER_TOKENS_S], "#17becf", 0}}, 1, NULL, NULL, NULL, 1, 0, "%.0f"},
      {"mfu", "MFU", "MFU %", "no step lines with MFU in logs/rank-R.log",
       {{"MFU %", &S[PRM_AN_SER_MFU], "#8c564b", S[PRM_AN_SER_MFU].n < 40}}, 1, NULL, NULL, NULL, 1, 0,
       "%.1f%%"},
      {"step_ms", "Step time", "ms", "no step lines with step_ms in events.jsonl",
       {{"step time (rank 0)", &S[PRM_AN_SER_STEP_MS], "#ff7f0e", 0}}, 1, multi ? &S[PRM_AN_SER_STEP_MIN] : NULL,
       multi ? &S[PRM_AN_SER_STEP_MAX] : NULL, "min-max over ranks (logged steps)", 1, 1, "%.1f ms"},
  };
  int data = 0;
  for (int k = 0; k < PRM_AN_REPORT_CHARTS; k++) {
    prm_sb_append(&o, "<figure>");
    data += prm__an_chart(&o, &charts[k], rs) > 0;
    prm_sb_append(&o, "</figure>\n");
  }
  prm_sb_append(&o, "</div>\n");
  if (with_data) *with_data = data;
  } /* !eval_only */

  /* Tables: configuration, run, platform, goodput, events. */
  prm_sb_append(&o, "<h2>Run</h2>\n<div class=\"tables\">\n<table id=\"config\"><caption>Configuration");
  prm_sb_append(&o, " (config/resolved.yaml)</caption>\n");
  static const char *const keys[][2] = {
      {"model", "model"}, {"framework", "framework"}, {"hidden_size", "hidden size"},
      {"num_layers", "layers"}, {"num_attention_heads", "attention heads"},
      {"num_query_groups", "query groups"}, {"ffn_hidden_size", "FFN size"}, {"vocab_size", "vocabulary"},
      {"seq_length", "sequence length"}, {"num_experts", "experts"}, {"micro_batch_size", "micro-batch"},
      {"global_batch_size", "global batch"}, {"train_iters", "train iterations"}, {"lr", "learning rate"},
      {"min_lr", "min lr"}, {"lr_decay_style", "lr decay"}, {"lr_warmup_iters", "warm-up iterations"},
      {"weight_decay", "weight decay"}, {"clip_grad", "gradient clip"}, {"bf16", "bf16"},
      {"tensor_model_parallel_size", "tensor parallel"}, {"pipeline_model_parallel_size", "pipeline parallel"},
      {"use_distributed_optimizer", "distributed optimizer"}, {"data_path", "data"},
      {"tokenizer_type", "tokenizer"}, {"seed", "seed"}, {"save", "checkpoints"},
      {"save_interval", "save interval"}, {"eval_interval", "eval interval"},
  };
  int rows = 0;
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
    if (!prm__an_yaml(in->resolved, keys[k][0], v, sizeof v)) continue;
    prm__an_row(&o, keys[k][1], v);
    rows++;
  }
  if (!rows) prm__an_row(&o, "config", in->resolved ? "no known keys" : "no data (no config/resolved.yaml)");
  prm_sb_append(&o, "</table>\n<table id=\"run\"><caption>Run (metadata.json)</caption>\n");
  if (meta) {
    static const char *const mk[][2] = {{"task", "task"},           {"subtask", "subtask"},
                                        {"runtime", "runtime"},     {"host", "host"},
                                        {"start_time", "start"},    {"end_time", "end"},
                                        {"primus_version", "primus"}, {"cwd", "working folder"}};
    for (size_t k = 0; k < sizeof mk / sizeof mk[0]; k++) prm__an_row(&o, mk[k][1], prm__an_jstr(meta, mk[k][0]));
    if (prm__an_jnum(meta, "duration_s", &x)) prm__an_fmt(v, sizeof v, "%.3f s", x);
    else snprintf(v, sizeof v, "-");
    prm__an_row(&o, "duration", v);
    if (prm__an_jnum(meta, "exit_code", &x)) snprintf(v, sizeof v, "%d (%s)", (int)x, in->outcome ? in->outcome : "?");
    else snprintf(v, sizeof v, "none (still running, or the launcher died)");
    prm__an_row(&o, "exit status", v);
  } else {
    prm__an_row(&o, "metadata", in->metadata ? "not valid JSON" : "no data (no metadata.json)");
  }
  prm_sb_append(&o, "</table>\n<table id=\"platform\"><caption>Platform (env/platform.json)</caption>\n");
  if (plat) {
    prm__an_row(&o, "platform", prm__an_jstr(plat, "name"));
    prm__an_row(&o, "host", prm__an_jstr(plat, "hostname"));
    const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(plat, "cpu");
    prm__an_row(&o, "CPU", prm__an_jstr(cpu, "model"));
    if (prm__an_jnum(cpu, "cores", &x)) {
      double numa = 0;
      prm__an_jnum(cpu, "numa_nodes", &numa);
      snprintf(v, sizeof v, "%d cores, %d NUMA node%s", (int)x, (int)numa, (int)numa == 1 ? "" : "s");
      prm__an_row(&o, "cores", v);
    }
    const cJSON *acc = cJSON_GetObjectItemCaseSensitive(plat, "accelerators");
    if (prm__an_jnum(acc, "count", &x)) {
      const char *model = prm__an_jstr(acc, "model");
      snprintf(v, sizeof v, "%d%s%s", (int)x, model && *model ? " x " : "", model ? model : "");
      prm__an_row(&o, "accelerators", v);
    }
    if (rs->rank_logs) {
      snprintf(v, sizeof v, "%d", rs->rank_logs);
      prm__an_row(&o, "ranks with step logs", v);
    }
  } else {
    prm__an_row(&o, "platform", in->platform ? "not valid JSON" : "no data (no env/platform.json)");
  }
  prm_sb_append(&o, "</table>\n<table id=\"goodput\"><caption>Goodput (metadata.json)</caption>\n");
  if (cJSON_IsObject(gp)) {
    static const char *const gk[][2] = {{"wall_s", "wall"},           {"productive_s", "productive steps"},
                                        {"recomputed_s", "recomputed"}, {"checkpoint_s", "checkpoints"},
                                        {"restart_s", "restarts"},      {"other_s", "other"}};
    if (prm__an_jnum(gp, "goodput", &x)) {
      prm__an_fmt(v, sizeof v, "%.1f%%", 100 * x);
      prm__an_row(&o, "goodput", v);
    }
    for (size_t k = 0; k < sizeof gk / sizeof gk[0]; k++)
      if (prm__an_jnum(gp, gk[k][0], &x)) {
        prm__an_fmt(v, sizeof v, "%.3f s", x);
        prm__an_row(&o, gk[k][1], v);
      }
    if (prm__an_jnum(gp, "restarts", &x)) {
      snprintf(v, sizeof v, "%d", (int)x);
      prm__an_row(&o, "restart count", v);
    }
  } else {
    prm__an_row(&o, "goodput", "no data (not in metadata.json)");
  }
  prm_sb_append(&o, "</table>\n</div>\n");

  /* Events: the markers and the evaluations, by step (an eval-only run's
   * evaluations are its own table above). */
  int n_ev = eval_only ? 0 : rs->n_ev, n_rows = rs->n_mk + n_ev;
  prm_sb_appendf(&o, "<h2>Events (%d)</h2>\n", n_rows);
  if (n_rows) {
    prm_sb_append(&o, "<table class=\"events\" id=\"events\"><tr><th>step</th><th>event</th><th>time</th>"
                      "<th>detail</th></tr>\n");
    /* Rows: k < n_mk a marker, else evaluation k - n_mk; stable by step. */
    int *row = prm_xmalloc(sizeof(int) * (size_t)n_rows);
    for (int k = 0; k < n_rows; k++) row[k] = k;
#define PRM__ROW_STEP(k) ((k) < rs->n_mk ? rs->mk[k].step : rs->ev[(k) - rs->n_mk].step)
    for (int k = 1; k < n_rows; k++)
      for (int j = k; j > 0 && PRM__ROW_STEP(row[j - 1]) > PRM__ROW_STEP(row[j]); j--) {
        int t = row[j];
        row[j] = row[j - 1];
        row[j - 1] = t;
      }
#undef PRM__ROW_STEP
    for (int i = 0; i < n_rows; i++) {
      int k = row[i];
      char when[32] = "";
      if (k < rs->n_mk) {
        const prm_an_marker_t *m = &rs->mk[k];
        if (m->time > 0) prm_time_format(when, sizeof when, "%Y-%m-%d %H:%M:%S", m->time);
        prm_sb_appendf(&o, "<tr><td>%lld</td><td style=\"color:%s\">%s</td><td>%s</td><td>", (long long)m->step,
                       prm__an_mk_colors[m->kind], prm_an_marker_name(m->kind), when);
        prm_an_html_escape(&o, m->detail);
      } else {
        const prm_an_eval_t *e = &rs->ev[k - rs->n_mk];
        if (e->time > 0) prm_time_format(when, sizeof when, "%Y-%m-%d %H:%M:%S", e->time);
        prm_sb_appendf(&o, "<tr class=\"eval\"><td>%lld</td><td style=\"color:#d62728\">eval</td><td>%s</td><td>",
                       (long long)e->step, when);
        prm_sb_appendf(&o, "valid loss %.4f", e->loss);
        if (isfinite(e->perplexity)) prm_sb_appendf(&o, ", perplexity %.3f", e->perplexity);
        if (e->tokens >= 0) prm_sb_appendf(&o, ", %lld tokens", (long long)e->tokens);
      }
      prm_sb_append(&o, "</td></tr>\n");
    }
    free(row);
    prm_sb_append(&o, "</table>\n");
  } else {
    prm_sb_append(&o, "<p class=\"sub\">No evaluations, checkpoints, restarts, faults or alerts in "
                      "events.jsonl.</p>\n");
  }
  char now[32];
  prm_time_format(now, sizeof now, "%Y-%m-%d %H:%M:%S", prm_time_wall());
  prm_sb_appendf(&o, "<footer>primus %s analyze report, %s. Sources: events.jsonl", PRM_VERSION, now);
  if (rs->bad_lines) prm_sb_appendf(&o, " (%d unreadable line%s)", rs->bad_lines, rs->bad_lines == 1 ? "" : "s");
  prm_sb_append(&o, ", logs/rank-R.log, metadata.json, config/resolved.yaml, env/platform.json. "
                    "<span id=\"status\">charts=? (the counting script did not run)</span></footer>\n");
  prm_sb_append(&o, "</main></body></html>\n");
  cJSON_Delete(meta);
  cJSON_Delete(plat);
  return prm_sb_steal(&o);
}

/* ------------------------------------------------------------------------ */
/* From a run directory to a file                                            */
/* ------------------------------------------------------------------------ */

static char *prm__an_slurp(const char *dir, const char *rel) {
  char *p = prm_path_join(dir, rel), *text = NULL;
  size_t len = 0;
  if (prm_fs_read_all(p, &text, &len, NULL)) text = NULL;
  free(p);
  return text;
}

int prm_an_report_write(const char *run_dir, const char *out_path, char **written, int *with_data,
                        prm_err_t *err) {
  prm_an_opts_t opts = {0}; /* no kernel log: the report is about the run */
  prm_an_diag_t d;
  int rc = prm_an_run(run_dir, &opts, &d, err);
  if (rc) {
    prm_an_diag_free(&d);
    return rc;
  }
  prm_sb_t sum = {0};
  prm_an_summary(&d, &sum);
  prm_an_runseries_t rs = {0};
  prm_an_series_read(run_dir, &rs);
  char *meta = prm__an_slurp(run_dir, "metadata.json");
  char *resolved = prm__an_slurp(run_dir, "config/resolved.yaml");
  char *plat = prm__an_slurp(run_dir, "env/platform.json");
  char *abs = prm_path_abs(run_dir);
  prm_an_report_in_t in = {abs,  prm_sb_str(&sum), d.failed ? "failed" : d.recovered ? "recovered" : "succeeded",
                           &rs,  meta,             resolved,
                           plat};
  char *html = prm_an_report_html(&in, with_data);
  char *path = out_path ? prm_xstrdup(out_path) : prm_path_join(run_dir, "report.html");
  rc = prm_fs_write_atomic(path, html, strlen(html), err);
  if (!rc && written)
    *written = path;
  else
    free(path);
  free(html);
  free(abs);
  free(meta);
  free(resolved);
  free(plat);
  prm_an_series_free(&rs);
  prm_sb_free(&sum);
  prm_an_diag_free(&d);
  return rc;
}
