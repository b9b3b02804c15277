/* task_env.c - `primus env`: the detected platform, the env profile chain
 * that applies to it, and the variables that result. */
#define _GNU_SOURCE
#include "tasks-impl.h"
#include "primus/prm_device.h"
#include "primus/prm_platform.h"

#include <stdlib.h>
#include <string.h>

static const prm_opt_t prm__env_opts[] = {
    {"json", 0, PRM_OPT_FLAG, NULL, NULL, "print the platform as JSON (platform.json) only"},
    {NULL},
};

static int prm__env_show(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_platform_t p;
  int rc = prm_platform_detect(&p, err);
  if (rc) return rc;
  if (prm_args_flag(ctx->args, "json")) {
    char *j = prm_platform_to_json(&p);
    fprintf(ctx->out, "%s\n", j);
    free(j);
    return 0;
  }
  prm_sb_t out = {0};
  prm_platform_describe(&p, &out);
  prm_argv_t chain = {0};
  prm_profile_chain(&p, &chain);
  prm_sb_append(&out, "\nProfile chain:\n");
  for (int i = 0; i < chain.n; i++) prm_sb_appendf(&out, "  %d. %s\n", i + 1, chain.v[i]);
  prm_env_t vars = {0}, facts = {0};
  prm_platform_profile_inputs(&p, &facts);
  rc = prm_profile_load_env(&chain, &facts, &vars, err);
  prm_env_free(&facts);
  if (rc == 0) {
    prm_sb_append(&out, "\nVariables the profiles set (a variable you set yourself is left alone):\n");
    for (int i = 0; i < vars.n; i++) prm_sb_appendf(&out, "  %s=%s\n", vars.keys[i], vars.vals[i]);
  }
  /* Where training would compute (device: auto), and why. */
  prm_gemm_t g;
  prm_err_t e2 = {0};
  prm_dev_t *d = NULL;
  prm_dev_opts_t o = {.want = "auto"};
  if (!prm_gemm_init(&g, NULL, &e2)) {
    o.gemm = g;
    if (!prm_dev_open(&o, &d, &e2)) {
      prm_sb_append(&out, "\nTraining device (device: auto):\n  ");
      prm_dev_describe(d, &out);
      prm_sb_appendf(&out, "\n  %s\n", d->why);
      prm_dev_close(d);
    }
  }
  fputs(prm_sb_str(&out), ctx->out);
  prm_sb_free(&out);
  prm_env_free(&vars);
  prm_argv_free(&chain);
  return rc;
}

static const prm_subtask_t prm__env_subs[] = {
    {"show", "print the platform, the env profile chain and the resulting variables", NULL,
     "Detection reads sysfs (PRIMUS_SYSFS_ROOT points it at a fixture tree), the\n"
     "vendors' SMI tools when present, and cpuid. Profiles: platforms/base.sh, then\n"
     "platforms/<platform>.sh, then --env values.",
     prm__env_opts, 0, prm__env_show},
    {NULL},
};

const prm_task_t prm__task_env = {"env", "show the detected platform and its environment profile",
                                  prm__env_subs, "show"};
