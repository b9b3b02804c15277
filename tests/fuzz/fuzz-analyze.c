/* fuzz-analyze.c - a run folder as `primus analyze` reads it: the input
 * is events.jsonl, logs/rank-0.log or metadata.json (first input byte),
 * read by the chart series (prm_an_series_*) and the diagnosis
 * (prm_an_run, prm_an_format, prm_an_summary). */
#include "fuzz.h"

#include "primus/prm_analyze.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const files[] = {"run/events.jsonl", "run/logs/rank-0.log",
                                      "run/metadata.json"};
  if (!size) return 0;
  int which = data[0] % 3;
  char *text = fz_str(data + 1, size - 1);
  prm_an_runseries_t rs;
  memset(&rs, 0, sizeof rs);
  if (which == 0) prm_an_series_parse_events(&rs, text);
  if (which == 1) {
    prm_an_series_parse_log(&rs, 0, text);
    prm_an_series_parse_log(&rs, 1, text);
    prm_an_series_finish_logs(&rs);
  }
  prm_an_series_free(&rs);
  /* One file at a time in the folder: the others are removed. */
  for (int i = 0; i < 3; i++)
    if (i != which) {
      char p[512];
      snprintf(p, sizeof p, "%s/%s", fz_dir(), files[i]);
      unlink(p);
    }
  fz_write(files[which], data + 1, size - 1);
  char run[512];
  snprintf(run, sizeof run, "%s/run", fz_dir());
  prm_an_opts_t o = {.kernel_log = NULL, .use_dmesg = 0};
  prm_an_diag_t d;
  memset(&d, 0, sizeof d);
  prm_err_t err = {0};
  if (prm_an_run(run, &o, &d, &err) == 0) {
    prm_sb_t out = {0};
    prm_an_format(&d, &out);
    prm_an_summary(&d, &out);
    prm_sb_free(&out);
  }
  prm_an_diag_free(&d);
  memset(&rs, 0, sizeof rs);
  prm_an_series_read(run, &rs);
  prm_an_series_free(&rs);
  free(text);
  return 0;
}
