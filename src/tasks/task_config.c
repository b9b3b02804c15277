/* task_config.c - `primus config show|validate|presets`: the resolved
 * experiment with the origin of every value, validation alone, and the
 * shipped presets with their model sizes. */
#define _GNU_SOURCE
#include "tasks-impl.h"

#include <stdlib.h>
#include <string.h>

static const prm_opt_t prm__config_opts[] = {
    {"config", 'c', PRM_OPT_STR, "FILE", NULL, "experiment YAML to resolve"},
    {"module", 0, PRM_OPT_STR, "NAME", NULL, "module to show (pre_trainer, post_trainer; default: the first)"},
    {"no_origins", 0, PRM_OPT_FLAG, NULL, NULL, "omit the '# file:line' origin comments"},
    {NULL},
};

static int prm__config_show(prm_task_ctx_t *ctx, prm_err_t *err) {
  PRM_ASSERT(ctx->exp);
  prm_sb_t out = {0};
  prm_exp_dump(ctx->exp, &out, !prm_args_flag(ctx->args, "no_origins"));
  fputs(prm_sb_str(&out), ctx->out);
  prm_sb_free(&out);
  return 0;
}

static int prm__config_validate(prm_task_ctx_t *ctx, prm_err_t *err) {
  PRM_ASSERT(ctx->exp);
  prm_exp_announce(ctx->exp);
  int64_t params = 0;
  prm_err_t perr = {0};
  if (prm_exp_model_params(ctx->exp, &params, &perr) == 0)
    fprintf(ctx->out, "ok: %s (module %s, %.3fB parameters)\n",
            prm_args_str(ctx->args, "config"), prm_exp_module(ctx->exp), (double)params / 1e9);
  else
    fprintf(ctx->out, "ok: %s (module %s)\n", prm_args_str(ctx->args, "config"),
            prm_exp_module(ctx->exp));
  return 0;
}

static int prm__config_presets(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *kinds[] = {"modules/native", "models/native", "modules/megatron", "models/megatron"};
  for (int k = 0; k < 4; k++) {
    char *dir = prm_xasprintf("%s/configs/%s", prm_home(), kinds[k]);
    prm_argv_t names = {0};
    if (prm_fs_list_dir(dir, &names, err) != 0) {
      free(dir);
      return err->code;
    }
    fprintf(ctx->out, "%s (%s):\n", k % 2 ? "model presets" : "module presets", dir);
    for (int i = 0; i < names.n; i++) {
      if (!prm_endswith(names.v[i], ".yaml")) continue;
      fprintf(ctx->out, "  %.*s\n", (int)(strlen(names.v[i]) - 5), names.v[i]);
    }
    prm_argv_free(&names);
    free(dir);
  }
  return 0;
}

static const prm_opt_t prm__no_opts[] = {{NULL}};

static const prm_subtask_t prm__config_subs[] = {
    {"show", "print the resolved experiment with the origin of every value", NULL,
     "Resolves extends, ${VAR}, presets, overrides and key=value arguments, exactly\n"
     "as training will, and prints the result. Each value is followed by the file\n"
     "and line it came from.\n\n"
     "Example: primus config show --config configs/examples/llama_tiny-pretrain.yaml lr=1e-3",
     prm__config_opts, PRM_SUB_EXPERIMENT | PRM_SUB_EXP_REQUIRED, prm__config_show},
    {"validate", "check an experiment and exit 0 when it is valid", NULL, NULL,
     prm__config_opts, PRM_SUB_EXPERIMENT | PRM_SUB_EXP_REQUIRED, prm__config_validate},
    {"presets", "list the shipped module and model presets", NULL, NULL, prm__no_opts, 0,
     prm__config_presets},
    {NULL},
};

const prm_task_t prm__task_config = {"config", "resolve, check and explain experiment configs",
                                     prm__config_subs, NULL};
