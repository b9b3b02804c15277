/* gguf-impl.h - what `export gguf` and `import gguf` share inside
 * src/tasks: the tensor map between the Hugging Face and GGUF names (with
 * the Q/K permutation each needs), the model's sizes, and the vocabulary
 * a checkpoint folder's tokenizer gives. docs/interop.md describes the
 * layout. */
#ifndef PRM_GGUF_IMPL_H
#define PRM_GGUF_IMPL_H

#include "tasks-impl.h"
#include "primus/prm_io.h"

#include <stdint.h>

enum { PRM__DIM_C, PRM__DIM_F, PRM__DIM_V, PRM__DIM_HD, PRM__DIM_GD, PRM__DIM_D, PRM__DIM_E,
       PRM__DIM_NONE };
enum { PRM__PERM_NONE, PRM__PERM_Q, PRM__PERM_K };

/* One tensor: its Hugging Face and GGUF names (layer tensors have "%d"),
 * its HF shape (rows, cols; cols NONE for a vector), and the permutation. */
typedef struct {
  const char *hf, *gguf;
  int rows, cols, perm;
} prm__map_t;

/* The model's sizes, from config.json or the GGUF keys. */
typedef struct {
  prm_hf_config_t h;
  int64_t head_dim;
  /* llama.cpp's architecture: "llama", or "qwen2" (q/k/v biases) and
   * "qwen3" (q/k norms), which rotate halves as Hugging Face does (no
   * Q/K permutation). */
  const char *arch;
} prm__shape_t;

/* A tensor of the map, named for layer l, with its HF shape. */
typedef struct {
  char hf[96], gguf[64];
  int64_t rows, cols; /* cols 0: a vector */
  int perm;
  int64_t numel;
  /* A Mixtral layer's experts (ffn_{gate,down,up}_exps): nexp > 0 HF
   * tensors of (rows, cols), hf naming expert e with "%d", stacked into
   * one GGUF tensor of ne {cols, rows, nexp}; numel counts them all. */
  int64_t nexp;
} prm__tname_t;

/* Checks the sizes of s->h (naming file in errors) and sets s->head_dim
 * and s->arch. What llama.cpp's architectures lack is refused (q/k/v
 * biases with q/k norms, RoPE scaling on Qwen; MoE models other than
 * Mixtral's shape: dense layers, a shared expert, the attention variants). */
int prm__shape_check(prm__shape_t *s, const char *file, prm_err_t *err);
/* Every tensor of the model in Hugging Face order (the order primus'
 * checkpoints write); *n gets the count. Caller frees. */
prm__tname_t *prm__tensor_list(const prm__shape_t *s, int *n);

/* llama.cpp's token types. */
enum { PRM__TT_NORMAL = 1, PRM__TT_CONTROL = 3, PRM__TT_USER = 4, PRM__TT_UNUSED = 5 };

typedef struct {
  char **tokens;   /* (V) */
  int32_t *types;  /* (V) */
  char **merges;
  int64_t nmerges;
  int64_t bos, eos;
  int byte_vocab;
} prm__vocab_t;

/* The vocabulary of checkpoint folder dir (see gguf_vocab.c); v owns its
 * strings, freed by prm__vocab_free with the same V. */
int prm__vocab_load(prm__vocab_t *v, const char *dir, const prm_hf_config_t *h, const char *model,
                    prm_err_t *err);
void prm__vocab_free(prm__vocab_t *v, int64_t V);

#endif
