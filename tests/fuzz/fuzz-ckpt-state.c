/* fuzz-ckpt-state.c - the checkpoint readers that resuming uses: a valid
 * checkpoint of a tiny model is saved once; each input replaces one of
 * its files (first byte: optim-rank-00000.bin, state-rank-00000.json,
 * latest_checkpointed_iteration.txt, config.json) and the checkpoint is
 * resolved, its optimizer state loaded (whole and as a shard) and resumed
 * from. */
#include "fuzz.h"

#include "primus/prm_kernels.h"
#include "primus/prm_model.h"
#include "primus/prm_train.h"

static const char *const files[] = {"iter_0000020/optim-rank-00000.bin",
                                    "iter_0000020/state-rank-00000.json",
                                    "latest_checkpointed_iteration.txt",
                                    "iter_0000020/config.json"};
enum { NFILES = 4 };
static char *orig[NFILES];
static size_t orig_len[NFILES];
static prm_llama_t *model;
static float *am, *av;

static void setup(void) {
  prm_llama_config_t c = {.vocab = 11, .hidden = 8, .layers = 1, .heads = 2, .groups = 1,
                          .ffn = 12, .max_pos = 4, .norm_eps = 1e-5, .rope_base = 10000,
                          .init_std = 0.02};
  static prm_gemm_t g;
  prm_err_t err = {0};
  char save[512];
  snprintf(save, sizeof save, "%s/save", fz_dir());
  if (prm_gemm_init(&g, NULL, &err) || prm_llama_new(&c, 1, 4, 0, &g, &model, &err)) goto fail;
  prm_llama_init(model, 1);
  am = calloc((size_t)model->nparams, sizeof *am);
  av = calloc((size_t)model->nparams, sizeof *av);
  for (int64_t i = 0; i < model->nparams; i++) am[i] = (float)i, av[i] = (float)i * 0.5f;
  prm_ckpt_state_t st = {.iteration = 20, .consumed_samples = 40, .seed = 3, .adam_m = am,
                         .adam_v = av};
  if (prm_ckpt_save(model, save, 20, "ByteTokenizer", NULL, &st, &err)) goto fail;
  for (int i = 0; i < NFILES; i++) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", save, files[i]);
    if (prm_fs_read_all(p, &orig[i], &orig_len[i], &err)) goto fail;
  }
  return;
fail:
  fprintf(stderr, "fuzz-ckpt-state: setup: %s\n", err.msg);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!model) setup();
  if (!size) return 0;
  int which = data[0] % NFILES;
  char rel[600];
  for (int i = 0; i < NFILES; i++) {
    snprintf(rel, sizeof rel, "save/%s", files[i]);
    if (i == which)
      fz_write(rel, data + 1, size - 1);
    else
      fz_write(rel, orig[i], orig_len[i]);
  }
  char save[512];
  snprintf(save, sizeof save, "%s/save", fz_dir());
  char *dir = NULL;
  int64_t iter = 0;
  prm_err_t err = {0};
  if (prm_ckpt_resolve(save, &dir, &iter, &err) == 0) {
    prm_ckpt_state_t st;
    memset(&st, 0, sizeof st);
    prm_ckpt_load_state(dir, model, am, av, &st, &err);
    memset(&st, 0, sizeof st);
    int64_t half = model->nparams / 2;
    prm_ckpt_load_state_range(dir, model, half, model->nparams, am, av, &st, &err);
    prm_llama_config_t c;
    char tok[64];
    prm_ckpt_read_config(dir, &c, tok, sizeof tok, &err);
  }
  free(dir);
  prm_ckpt_state_t st;
  memset(&st, 0, sizeof st);
  prm_ckpt_resume(model, save, am, av, &st, &err);
  return 0;
}
