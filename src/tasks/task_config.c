/* task_config.c - `primus config show|validate|presets`: the resolved
 * experiment with the origin of every value, validation alone, and the
 * shipped presets with their model sizes. */
#define _GNU_SOURCE
#include "tasks-impl.h"
#include "primus/prm_train.h"

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

/* What a run would meet first that the schema cannot see: the tokenizer
 * (the trainer's options are read as training reads them), the data
 * (a file, or an indexed prefix's .bin and .idx) and `load`. Each problem
 * is one line of *out, naming the key and where it was set; returns how
 * many. */
static int prm__config_files(const prm_exp_t *e, prm_sb_t *out) {
  int n = 0;
  prm_train_opts_t o;
  prm_err_t oerr = {0};
  if (prm_train_opts_from_exp(e, &o, &oerr)) {
    prm_sb_appendf(out, "\n  %s", oerr.msg);
    return 1;
  }
  if (!o.mock_data && o.tokenizer_type) { /* the tokenizer loads (a file, folder or cached id) */
    prm_tokenizer_t *t = NULL;
    prm_err_t terr = {0};
    if (prm_tokenizer_open(o.tokenizer_type, o.tokenizer_model, &t, &terr)) {
      char *origin = prm_exp_origin(e, o.tokenizer_model ? "tokenizer_model" : "tokenizer_type");
      prm_sb_appendf(out, "\n  %s%s%s", origin ? origin : "", origin ? ": " : "", terr.msg);
      free(origin);
      n++;
    }
    prm_tokenizer_free(t);
  }
  const char *keys[] = {"data_path", "load"};
  for (int i = 0; i < 2; i++) {
    const char *v = i ? o.load : (o.mock_data || o.data_blend ? NULL : o.data_path);
    if (!v) continue;
    char *bin = prm_xasprintf("%s.bin", v), *idx = prm_xasprintf("%s.idx", v);
    int there = i ? prm_fs_is_dir(v)
                  : (prm_fs_exists(v) && !prm_fs_is_dir(v)) || (prm_fs_exists(bin) && prm_fs_exists(idx));
    if (!there) {
      char *origin = prm_exp_origin(e, keys[i]);
      prm_sb_appendf(out, "\n  %s%s%s: %s: %s", origin ? origin : "", origin ? ": " : "", keys[i],
                     v, i ? "no such folder (a checkpoint folder or a Hugging Face model folder)"
                          : "no such file, nor an indexed dataset PREFIX.bin + PREFIX.idx");
      free(origin);
      n++;
    }
    free(bin);
    free(idx);
  }
  return n;
}

static int prm__config_validate(prm_task_ctx_t *ctx, prm_err_t *err) {
  PRM_ASSERT(ctx->exp);
  prm_exp_announce(ctx->exp);
  const char *mod = prm_exp_module(ctx->exp);
  if (prm_streq(mod, "pre_trainer") || prm_streq(mod, "post_trainer")) {
    prm_sb_t probs = {0};
    int n = prm__config_files(ctx->exp, &probs);
    if (n) {
      int rc = prm_errf(err, PRM_ECONFIG, "%s: the keys are valid, but a run would stop at %d "
                        "problem%s:%s", prm_args_str(ctx->args, "config"), n, n == 1 ? "" : "s",
                        prm_sb_str(&probs));
      prm_sb_free(&probs);
      return rc;
    }
    prm_sb_free(&probs);
  }
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
