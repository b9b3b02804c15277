/* fuzz-rundir.c - a run directory as `primus replay` and `analyze report`
 * read it: the input replaces one file of a valid run folder (first input
 * byte mod 4: metadata.json, env/env_dump.txt, env/platform.json or
 * config/resolved.yaml; bit 2: --force), the others as primus wrote them
 * (fuzz-rundir.h). prm__replay_plan reads them all as `primus replay`
 * does, up to the command it would run (nothing is run), on the platform
 * the template was recorded on; then the report's tables read the same
 * three texts. */
#include "fuzz-rundir.h"

#include "primus/prm_analyze.h"

static char *tmpl_dir;
static char *tmpl[4];
static size_t tmpl_len[4];
static char run_rel[512];

static void setup(void) {
  char *parent = prm_xasprintf("%s/tmpl", fz_dir());
  tmpl_dir = fz_rundir_make(parent);
  free(parent);
  prm_err_t err = {0};
  for (int i = 0; i < 4; i++) {
    char *p = prm_path_join(tmpl_dir, fz_rundir_files[i]);
    if (prm_fs_read_all(p, &tmpl[i], &tmpl_len[i], &err)) {
      fprintf(stderr, "fuzz-rundir: %s\n", err.msg);
      abort();
    }
    free(p);
  }
  /* The fuzzed run directory: a sibling of the template. */
  snprintf(run_rel, sizeof run_rel, "%s-fuzz", tmpl_dir + strlen(fz_dir()) + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  if (!tmpl_dir) setup();
  int which = data[0] % 4, force = (data[0] & 4) != 0;
  char *texts[4] = {NULL};
  for (int i = 0; i < 4; i++) {
    char rel[600];
    snprintf(rel, sizeof rel, "%s/%s", run_rel, fz_rundir_files[i]);
    if (i == which) {
      fz_write(rel, data + 1, size - 1);
      texts[i] = fz_str(data + 1, size - 1);
    } else {
      fz_write(rel, tmpl[i], tmpl_len[i]);
      texts[i] = tmpl[i];
    }
  }
  char run[800];
  snprintf(run, sizeof run, "%s/%s", fz_dir(), run_rel);
  prm_platform_t here;
  fz_rundir_platform(&here);
  prm__replay_t plan;
  prm_err_t err = {0};
  if (prm__replay_plan(run, &here, force, data[0] & 8, &plan, &err) == 0) {
    /* What the launcher does with the plan before running it. */
    prm_argv_t envp = {0};
    prm_env_to_envp(&plan.env, &envp);
    char *line = prm_argv_join_shell(plan.argv.n - 1, plan.argv.v + 1);
    free(line);
    prm_argv_free(&envp);
    prm__replay_free(&plan);
  }
  /* The report's run, config and platform tables, over the same texts. */
  prm_an_runseries_t rs;
  memset(&rs, 0, sizeof rs);
  prm_an_report_in_t in = {run, "fuzz", "succeeded", &rs, texts[0], texts[3], texts[2]};
  int with_data = 0;
  free(prm_an_report_html(&in, &with_data));
  free(texts[which]);
  return 0;
}
