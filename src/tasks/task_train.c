/* task_train.c - the train pillar's commands: `train pretrain` and `train
 * posttrain` (the native engine; supervised fine-tuning), `eval` (validation loss and perplexity) and `generate` (text
 * from a checkpoint), plus the hidden `train grads` used by the PyTorch
 * oracle tests. */
#define _GNU_SOURCE
#include "tasks-impl.h"
#include "primus/prm_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Reads the trainer's options; only the native framework is built in.
 * `multi`: the command runs on many ranks (data parallel). */
static int prm__opts(prm_task_ctx_t *ctx, int multi, prm_train_opts_t *o, prm_err_t *err) {
  PRM_ASSERT(ctx->exp);
  if (ctx->world > 1 && !multi)
    return prm_errf(err, PRM_ECONFIG, "%d ranks: this command runs on one rank", ctx->world);
  if (ctx->rank == 0) prm_exp_announce(ctx->exp);
  int rc = prm_train_opts_from_exp(ctx->exp, o, err);
  o->world = ctx->world > 1 ? ctx->world : 1;
  int on = 0;
  o->overwrite_ckpt = !rc && !prm_exp_get_bool(ctx->exp, "overwrite_checkpoints", &on) && on;
  return rc;
}

/* ------------------------------------------------------------------------ */
/* train                                                                     */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__train_opts[] = {
    {"config", 'c', PRM_OPT_STR, "FILE", NULL, "experiment YAML (modules.pre_trainer)"},
    {NULL},
};

static int prm__train_pretrain(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_train_opts_t o;
  int rc = prm__opts(ctx, 1, &o, err);
  if (rc) return rc;
  if (o.sft)
    return prm_errf(err, PRM_EINVAL, "train pretrain: the experiment's module is post_trainer "
                                     "(fine-tuning); run `primus train posttrain`");
  return prm_train_run(&o, ctx->run_dir, err);
}

static const prm_opt_t prm__posttrain_opts[] = {
    {"config", 'c', PRM_OPT_STR, "FILE", NULL, "experiment YAML (modules.post_trainer)"},
    {"module", 0, PRM_OPT_STR, "NAME", "post_trainer", "module of the experiment to run"},
    {NULL},
};

static int prm__train_posttrain(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_train_opts_t o;
  int rc = prm__opts(ctx, 1, &o, err);
  if (rc) return rc;
  if (!o.sft)
    return prm_errf(err, PRM_EINVAL, "train posttrain: module %s is not post_trainer",
                    prm_exp_module(ctx->exp));
  return prm_train_run(&o, ctx->run_dir, err);
}

static const prm_opt_t prm__grads_opts[] = {
    {"config", 'c', PRM_OPT_STR, "FILE", NULL, "experiment YAML"},
    {"output", 'o', PRM_OPT_STR, "FILE", NULL, "safetensors file to write the gradients to"},
    {NULL},
};

static int prm__train_grads(prm_task_ctx_t *ctx, prm_err_t *err) {
  const char *out = prm_args_str(ctx->args, "output");
  if (!out) return prm_errf(err, PRM_EINVAL, "train grads: --output FILE is required");
  prm_train_opts_t o;
  int rc = prm__opts(ctx, 0, &o, err);
  if (rc) return rc;
  return prm_train_grads(&o, out, err);
}

static const prm_subtask_t prm__train_subs[] = {
    {"pretrain", "train a Llama-family model from scratch or from `load`", NULL,
     "Runs the native engine (framework: native) on the experiment's data_path: an\n"
     "indexed dataset prefix (PREFIX.bin/.idx) or a plain text file with\n"
     "tokenizer_type: ByteTokenizer. Every step goes to events.jsonl in the run\n"
     "directory; `save` receives iter_NNNNNNN/ folders in the Hugging Face layout.\n"
     "PRIMUS_GEMM=onednn|openblas|reference picks the GEMM backend; OMP_NUM_THREADS\n"
     "the thread count.\n\n"
     "Example:\n"
     "  primus train pretrain --config configs/examples/llama_tiny-pretrain.yaml train_iters=200",
     prm__train_opts,
     PRM_SUB_EXPERIMENT | PRM_SUB_EXP_REQUIRED | PRM_SUB_RUN | PRM_SUB_MULTIRANK | PRM_SUB_SUPERVISED,
     prm__train_pretrain},
    {"posttrain", "supervised fine-tuning on JSONL examples (prompt/response or chat)", NULL,
     "Runs the native engine on the post_trainer module: data_path is a JSONL file\n"
     "of {\"prompt\", \"response\"} or {\"messages\": [{\"role\", \"content\"}]} lines, made\n"
     "into tokens by chat_template (default | llama3); the loss covers only the\n"
     "response / assistant tokens. packing: true (default) packs examples up to\n"
     "seq_length with attention kept inside each. `load` gives the starting weights\n"
     "(a checkpoint folder or a Hugging Face Llama folder); finetune: true starts at\n"
     "step 1 with a fresh optimizer. See docs/posttrain.md.\n\n"
     "Example:\n"
     "  primus train posttrain --config configs/examples/llama_124M-posttrain.yaml",
     prm__posttrain_opts,
     PRM_SUB_EXPERIMENT | PRM_SUB_EXP_REQUIRED | PRM_SUB_RUN | PRM_SUB_MULTIRANK | PRM_SUB_SUPERVISED,
     prm__train_posttrain},
    {"grads", "write the first batch's gradients (for reference checks)", NULL, NULL,
     prm__grads_opts, PRM_SUB_EXPERIMENT | PRM_SUB_EXP_REQUIRED | PRM_SUB_HIDDEN,
     prm__train_grads},
    {NULL},
};

const prm_task_t prm__task_train = {"train", "train models (pretrain, posttrain)", prm__train_subs,
                                    NULL};

/* ------------------------------------------------------------------------ */
/* eval                                                                      */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__eval_opts[] = {
    {"config", 'c', PRM_OPT_STR, "FILE", NULL, "experiment YAML (data, split, batch sizes)"},
    {"load", 0, PRM_OPT_STR, "DIR", NULL, "weights: a Hugging Face folder or a save folder (default: the experiment's load)"},
    {"eval_iters", 0, PRM_OPT_INT, "N", NULL, "global batches to evaluate (default: the experiment's eval_iters)"},
    {"output", 'o', PRM_OPT_STR, "FILE", NULL, "also write the result as JSON to FILE"},
    {NULL},
};

static int prm__eval(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_train_opts_t o;
  int rc = prm__opts(ctx, 0, &o, err);
  if (rc) return rc;
  int64_t iters = prm_args_int(ctx->args, "eval_iters", o.eval_iters);
  prm_eval_result_t r;
  if ((rc = prm_eval_run(&o, prm_args_str(ctx->args, "load"), iters, &r, err))) return rc;
  char *json = prm_xasprintf("{\"split\": \"valid\", \"loss\": %.9g, \"perplexity\": %.9g, "
                             "\"tokens\": %lld, \"iters\": %lld}\n",
                             r.loss, r.perplexity, (long long)r.tokens, (long long)r.iters);
  fputs(json, ctx->out);
  PRM_INFO("eval | valid loss %.4f | perplexity %.3f | %lld tokens", r.loss, r.perplexity,
           (long long)r.tokens);
  /* The run directory's events.jsonl gets the result as a training run's
   * evaluations are recorded (no step: an evaluation run), for
   * `analyze report`. */
  if (ctx->run_dir && isfinite(r.loss)) {
    char *ev = prm_path_join(ctx->run_dir, "events.jsonl");
    FILE *f = fopen(ev, "a");
    if (f) {
      fprintf(f, "{\"event\":\"eval\",\"split\":\"valid\",\"loss\":%.9g,\"perplexity\":%.9g,\"tokens\":%lld,"
                 "\"iters\":%lld,\"time\":%.3f}\n",
              r.loss, r.perplexity, (long long)r.tokens, (long long)r.iters, prm_time_wall());
      if (fclose(f)) PRM_WARN("%s: cannot write the evaluation event", ev);
    } else {
      PRM_WARN("%s: cannot open: the report will not show this evaluation", ev);
    }
    free(ev);
  }
  const char *out = prm_args_str(ctx->args, "output");
  if (out) rc = prm_fs_write_atomic(out, json, strlen(json), err);
  free(json);
  return rc;
}

static const prm_subtask_t prm__eval_subs[] = {
    {"run", "validation loss and perplexity of a checkpoint", NULL,
     "Evaluates `eval_iters` global batches of the validation split (the second\n"
     "share of `split`) and prints {\"loss\", \"perplexity\", \"tokens\"} as JSON.\n\n"
     "Example:\n"
     "  primus eval --config configs/examples/llama_tiny-pretrain.yaml --load output/ckpt",
     prm__eval_opts, PRM_SUB_EXPERIMENT | PRM_SUB_EXP_REQUIRED | PRM_SUB_RUN, prm__eval},
    {NULL},
};

const prm_task_t prm__task_eval = {"eval", "evaluate a checkpoint on the validation split",
                                   prm__eval_subs, "run"};

/* ------------------------------------------------------------------------ */
/* generate                                                                  */
/* ------------------------------------------------------------------------ */

static const prm_opt_t prm__gen_opts[] = {
    {"load", 0, PRM_OPT_STR, "DIR", NULL, "a Hugging Face folder or a save folder (required)"},
    {"prompt", 'p', PRM_OPT_STR, "TEXT", NULL, "text to continue (required)"},
    {"max_new_tokens", 'n', PRM_OPT_INT, "N", "128", "tokens to generate (the default stops quietly where the model's context ends)"},
    {"temperature", 't', PRM_OPT_FLOAT, "T", "0.8", "sampling temperature; 0 is greedy"},
    {"top_k", 0, PRM_OPT_INT, "K", "0", "sample from the K most likely tokens; 0: all"},
    {"top_p", 0, PRM_OPT_FLOAT, "P", "1.0", "sample from the smallest set with probability >= P"},
    {"seed", 0, PRM_OPT_INT, "S", "1234", "random seed of the sampler"},
    {"device", 0, PRM_OPT_STR, "auto|cpu|cuda", "auto", "where the model runs (auto: the GPU when the CUDA module sees one)"},
    {"tokenizer_type", 0, PRM_OPT_STR, "NAME", NULL, "tokenizer (default: the one config.json names)"},
    {"tokenizer_model", 0, PRM_OPT_STR, "PATH", NULL, "its file (default: the checkpoint's tokenizer.json for HuggingFaceTokenizer, GPT-2's ranks for GPT2BPETokenizer)"},
    {NULL},
};

static int prm__generate(prm_task_ctx_t *ctx, prm_err_t *err) {
  prm_generate_opts_t g = {
      .load = prm_args_str(ctx->args, "load"),
      .prompt = prm_args_str(ctx->args, "prompt"),
      .tokenizer_type = prm_args_str(ctx->args, "tokenizer_type"),
      .tokenizer_model = prm_args_str(ctx->args, "tokenizer_model"),
      .max_new_tokens = prm_args_int(ctx->args, "max_new_tokens", 128),
      .top_k = prm_args_int(ctx->args, "top_k", 0),
      .temperature = prm_args_float(ctx->args, "temperature", 0.8),
      .top_p = prm_args_float(ctx->args, "top_p", 1.0),
      .seed = (uint64_t)prm_args_int(ctx->args, "seed", 1234),
      .device = prm_args_str(ctx->args, "device"),
      .out = ctx->out,
      .max_new_default = !prm_args_has(ctx->args, "max_new_tokens"),
  };
  if (!g.load) return prm_errf(err, PRM_EINVAL, "generate: --load DIR is required");
  if (!g.prompt) return prm_errf(err, PRM_EINVAL, "generate: --prompt TEXT is required");
  if (g.max_new_tokens < 0 || g.temperature < 0 || g.top_k < 0 || g.top_p < 0 || g.top_p > 1)
    return prm_errf(err, PRM_EINVAL,
                    "generate: max_new_tokens, temperature and top_k must be >= 0 and top_p in [0, 1]");
  return prm_generate(&g, err);
}

static const prm_subtask_t prm__gen_subs[] = {
    {"run", "continue a prompt with a trained model", NULL,
     "Uses a KV cache; greedy when --temperature 0, else samples with top-k/top-p.\n\n"
     "Example:\n"
     "  primus generate --load output/ckpt --prompt \"The jury said\" --max-new-tokens 200",
     prm__gen_opts, PRM_SUB_RUN, prm__generate},
    {NULL},
};

const prm_task_t prm__task_generate = {"generate", "generate text from a checkpoint",
                                       prm__gen_subs, "run"};
