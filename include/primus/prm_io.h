/* prm_io.h - model files in the formats other tools read: safetensors
 * (a little-endian u64 header length, a JSON header, raw tensor bytes) and
 * the Hugging Face Llama `config.json`; sharded folders through
 * `model.safetensors.index.json`.
 *
 * Every size and offset in a file is checked against the file's length, so
 * a truncated or hostile file is an error naming the file and tensor, never
 * a crash.
 */
#ifndef PRM_IO_H
#define PRM_IO_H

#include "primus/prm_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* safetensors, read                                                         */
/* ------------------------------------------------------------------------ */

#define PRM_ST_MAX_DIMS 8

typedef struct {
  const char *name;       /* owned by the file */
  char dtype[8];          /* "F32", "BF16", "F16", "I32", ... as in the header */
  int ndim;
  int64_t shape[PRM_ST_MAX_DIMS];
  int64_t numel;
  const void *data;       /* into the mapping; valid until prm_st_close */
  size_t nbytes;
} prm_st_tensor_t;

typedef struct prm_st_file prm_st_file_t;

/* Maps a .safetensors file read-only and parses its header. Errors
 * (PRM_EPARSE/PRM_ENOENT/PRM_EIO) read "path: ...": a header longer than
 * the file, a tensor whose offsets fall outside the data or disagree with
 * its shape and dtype, overlapping tensors, bad JSON. */
int prm_st_open(const char *path, prm_st_file_t **out, prm_err_t *err);
void prm_st_close(prm_st_file_t *f);
const char *prm_st_path(const prm_st_file_t *f);
int prm_st_count(const prm_st_file_t *f);
const prm_st_tensor_t *prm_st_at(const prm_st_file_t *f, int i);
const prm_st_tensor_t *prm_st_find(const prm_st_file_t *f, const char *name);
/* The header's "__metadata__" string value for key, or NULL. */
const char *prm_st_metadata(const prm_st_file_t *f, const char *key);

/* Copies a tensor into dst as f32, converting F32, BF16 and F16 (exact
 * widening). Any other dtype, or numel != n, is PRM_EINVAL naming the
 * tensor. */
int prm_st_read_f32(const prm_st_tensor_t *t, float *dst, int64_t n, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* safetensors, write                                                        */
/* ------------------------------------------------------------------------ */

typedef struct {
  const char *name;
  const float *data;
  int ndim;
  int64_t shape[PRM_ST_MAX_DIMS];
} prm_st_entry_t;

/* Writes f32 tensors in the given order (offsets ascending, header padded
 * with spaces to a multiple of 8 bytes) atomically: a temporary file,
 * fsync, rename, fsync of the folder. meta_kv is NULL or a NULL-terminated
 * list of key, value, key, value ... strings for "__metadata__". */
int prm_st_write_f32(const char *path, const prm_st_entry_t *t, int n,
                     const char *const *meta_kv, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* A Hugging Face weights folder: one file or shards                         */
/* ------------------------------------------------------------------------ */

typedef struct prm_hf_weights prm_hf_weights_t;

/* Opens DIR/model.safetensors, or every shard named by
 * DIR/model.safetensors.index.json ("weight_map": name -> file). */
int prm_hf_weights_open(const char *dir, prm_hf_weights_t **out, prm_err_t *err);
void prm_hf_weights_close(prm_hf_weights_t *w);
/* NULL when absent; *file (may be NULL) gets the path holding it. */
const prm_st_tensor_t *prm_hf_weights_find(const prm_hf_weights_t *w, const char *name,
                                           const char **file);
int prm_hf_weights_count(const prm_hf_weights_t *w);
const prm_st_tensor_t *prm_hf_weights_at(const prm_hf_weights_t *w, int i,
                                         const char **file);

/* ------------------------------------------------------------------------ */
/* config.json of LlamaForCausalLM                                           */
/* ------------------------------------------------------------------------ */

typedef struct {
  int64_t hidden_size, intermediate_size, num_attention_heads, num_key_value_heads;
  int64_t num_hidden_layers, vocab_size, max_position_embeddings;
  double rms_norm_eps, rope_theta;
  int tie_word_embeddings;
  int64_t bos_token_id, eos_token_id; /* -1 when absent/null */
  /* primus' own key "primus_tokenizer_type" (other tools ignore it): the
   * tokenizer the model was trained with; "" when absent. */
  char tokenizer_type[64];
} prm_hf_config_t;

/* Reads config.json. Required: hidden_size, intermediate_size,
 * num_attention_heads, num_hidden_layers, vocab_size. Defaults as in
 * transformers' LlamaConfig: num_key_value_heads = num_attention_heads,
 * rms_norm_eps 1e-6, rope_theta 10000, max_position_embeddings 2048,
 * tie_word_embeddings false. A model_type other than "llama" or a missing
 * or mistyped key is PRM_EPARSE naming the file and key. */
int prm_hf_config_read(const char *path, prm_hf_config_t *c, prm_err_t *err);
/* Writes it atomically with architectures ["LlamaForCausalLM"],
 * model_type "llama", hidden_act "silu", torch_dtype "float32". */
int prm_hf_config_write(const char *path, const prm_hf_config_t *c, prm_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* PRM_IO_H */
