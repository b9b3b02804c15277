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

#define PRM_HF_MOE_LAYERS_MAX 1024

typedef struct {
  int64_t hidden_size, intermediate_size, num_attention_heads, num_key_value_heads;
  int64_t num_hidden_layers, vocab_size, max_position_embeddings;
  double rms_norm_eps, rope_theta;
  int tie_word_embeddings;
  int64_t bos_token_id, eos_token_id; /* -1 when absent/null */
  /* primus' own key "primus_tokenizer_type" (other tools ignore it): the
   * tokenizer the model was trained with; "" when absent. */
  char tokenizer_type[64];
  /* MixtralForCausalLM (model_type "mixtral") when num_local_experts > 0:
   * intermediate_size is then each expert's size. primus' own keys (0
   * when absent): primus_moe_layer_freq (every k-th layer is MoE; absent:
   * 1), primus_dense_intermediate_size (the dense layers' size; absent:
   * intermediate_size), shared_expert_intermediate_size (as Qwen2-MoE). */
  int64_t num_local_experts, num_experts_per_tok;
  int64_t moe_layer_freq, dense_intermediate_size, shared_expert_intermediate_size;
  /* primus_moe_layers: moe_layer_freq given as a list, one 0/1 per layer
   * (num_hidden_layers of them, at most PRM_HF_MOE_LAYERS_MAX); n 0 when
   * absent. Written instead of primus_moe_layer_freq when n > 0. */
  int64_t moe_layers_n;
  uint8_t moe_layers[PRM_HF_MOE_LAYERS_MAX];
  /* Attention variants. model_type "qwen2" (Qwen2ForCausalLM) has q/k/v
   * biases, "qwen3" q/k norms; primus' keys primus_qkv_bias and
   * primus_qk_norm say so where the model_type cannot (a Mixtral-named MoE,
   * Qwen 3 with q/k/v biases but no o_proj bias). head_dim: 0 when absent
   * (hidden_size / num_attention_heads). */
  int64_t head_dim;
  int qkv_bias, qk_norm;
  /* rope_scaling with rope_type "llama3" (Llama 3.1); rope_factor 0: none. */
  double rope_factor, rope_low, rope_high;
  int64_t rope_orig;
} prm_hf_config_t;

/* Reads config.json. Required: hidden_size, intermediate_size,
 * num_attention_heads, num_hidden_layers, vocab_size. Defaults as in
 * transformers' LlamaConfig: num_key_value_heads = num_attention_heads,
 * rms_norm_eps 1e-6, rope_theta 10000, max_position_embeddings 2048,
 * tie_word_embeddings false. A model_type other than "llama", "mixtral",
 * "qwen2" or "qwen3", what those models have and primus' lacks
 * (attention_bias on an o_proj, Qwen 2's sliding window, a rope_scaling
 * type other than llama3), or a missing or mistyped key is PRM_EPARSE
 * naming the file and key. */
int prm_hf_config_read(const char *path, prm_hf_config_t *c, prm_err_t *err);
/* Writes it atomically with architectures ["LlamaForCausalLM"] and
 * model_type "llama" (Qwen3ForCausalLM/"qwen3" with q/k norms,
 * Qwen2ForCausalLM/"qwen2" with q/k/v biases, MixtralForCausalLM/"mixtral"
 * with experts), hidden_act "silu", torch_dtype "float32". */
int prm_hf_config_write(const char *path, const prm_hf_config_t *c, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* GGUF (llama.cpp's model file), version 3                                  */
/* ------------------------------------------------------------------------ */

/* The layout: "GGUF", u32 version 3, u64 tensor count, u64 key/value count,
 * the key/value pairs (u64-length strings, a u32 value type, the value),
 * the tensor infos (name, u32 dims, u64 sizes fastest-first - ne[0] is the
 * row length -, u32 ggml type, u64 offset into the data), zero padding to
 * the alignment (general.alignment, default 32), then the tensor data, each
 * tensor starting at a multiple of the alignment. All little-endian. */

#define PRM_GGUF_VERSION 3
#define PRM_GGUF_DEFAULT_ALIGNMENT 32
#define PRM_GGUF_MAX_DIMS 4
#define PRM_GGUF_MAX_NAME 63 /* llama.cpp's GGML_MAX_NAME - 1 */

/* Value types of the key/value pairs (the numbers are the file's). */
typedef enum {
  PRM_GGUF_U8 = 0,
  PRM_GGUF_I8 = 1,
  PRM_GGUF_U16 = 2,
  PRM_GGUF_I16 = 3,
  PRM_GGUF_U32 = 4,
  PRM_GGUF_I32 = 5,
  PRM_GGUF_F32 = 6,
  PRM_GGUF_BOOL = 7,
  PRM_GGUF_STRING = 8,
  PRM_GGUF_ARRAY = 9,
  PRM_GGUF_U64 = 10,
  PRM_GGUF_I64 = 11,
  PRM_GGUF_F64 = 12,
  PRM_GGUF__COUNT
} prm_gguf_type_t;

/* Tensor element types primus reads and writes (ggml's numbers); any other
 * ggml type in a file is an error naming the tensor. */
typedef enum {
  PRM_GGML_F32 = 0,
  PRM_GGML_F16 = 1,
} prm_ggml_type_t;

/* "u32", "string", "array" ... ("?" when out of range). */
const char *prm_gguf_type_name(prm_gguf_type_t t);

/* ---- writing ----------------------------------------------------------- */

typedef struct prm_gguf_writer prm_gguf_writer_t;

/* A file under construction: keys and tensors in the order they are added.
 * Keys and strings are copied; tensor data is borrowed until
 * prm_gguf_writer_write returns. Freed with prm_gguf_writer_free. */
prm_gguf_writer_t *prm_gguf_writer_new(void);
void prm_gguf_writer_free(prm_gguf_writer_t *w);
/* Scalars. A key added twice is PRM_EINVAL (reported by _write). */
void prm_gguf_set_u32(prm_gguf_writer_t *w, const char *key, uint32_t v);
void prm_gguf_set_i32(prm_gguf_writer_t *w, const char *key, int32_t v);
void prm_gguf_set_u64(prm_gguf_writer_t *w, const char *key, uint64_t v);
void prm_gguf_set_f32(prm_gguf_writer_t *w, const char *key, float v);
void prm_gguf_set_bool(prm_gguf_writer_t *w, const char *key, int v);
void prm_gguf_set_str(prm_gguf_writer_t *w, const char *key, const char *v);
/* Arrays (copied). */
void prm_gguf_set_arr_str(prm_gguf_writer_t *w, const char *key, const char *const *v, int64_t n);
void prm_gguf_set_arr_i32(prm_gguf_writer_t *w, const char *key, const int32_t *v, int64_t n);
void prm_gguf_set_arr_f32(prm_gguf_writer_t *w, const char *key, const float *v, int64_t n);
/* A tensor from f32 data (borrowed), stored as `type` (F16: rounded to
 * nearest even). ne: ndim sizes, fastest-first. */
void prm_gguf_add_tensor(prm_gguf_writer_t *w, const char *name, prm_ggml_type_t type, int ndim,
                         const int64_t *ne, const float *data);
/* Writes the file atomically (temporary file, fsync, rename, fsync of the
 * folder). The alignment is the u32 general.alignment when set (a power of
 * two), else 32. Errors name the path and the key or tensor at fault. */
int prm_gguf_writer_write(prm_gguf_writer_t *w, const char *path, prm_err_t *err);

/* ---- reading ----------------------------------------------------------- */

/* One key/value pair. Scalars are widened into u (U8..U64, BOOL), i
 * (I8..I64) or f (F32, F64); strings and string arrays are NUL-terminated
 * copies; numeric arrays point into the mapping (possibly unaligned: read
 * them with prm_gguf_arr_i64/_f64). */
typedef struct {
  const char *key;
  prm_gguf_type_t type;
  prm_gguf_type_t arr_type; /* ARRAY: the element type */
  uint64_t n;               /* ARRAY: the element count */
  uint64_t u;
  int64_t i;
  double f;
  const char *str;          /* STRING */
  const char *const *strs;  /* ARRAY of STRING: n strings */
  const void *arr;          /* numeric ARRAY: n elements in file order */
} prm_gguf_kv_t;

typedef struct {
  const char *name;
  prm_ggml_type_t type;
  int ndim;
  int64_t ne[PRM_GGUF_MAX_DIMS]; /* fastest-first; unused dims 1 */
  int64_t numel;
  uint64_t offset;               /* from the start of the data section */
  const void *data;              /* into the mapping */
  size_t nbytes;
} prm_gguf_tensor_t;

typedef struct prm_gguf_file prm_gguf_file_t;

/* Maps a GGUF file read-only and checks all of it: the magic and version
 * (3; 2 is read too), every length against the file, value types, array
 * sizes, tensor dims, types (F32 or F16), alignment and that every tensor's
 * bytes lie inside the file without overlapping another. Errors are
 * PRM_EPARSE (PRM_ENOENT, PRM_EIO) reading "path: what is wrong". */
int prm_gguf_open(const char *path, prm_gguf_file_t **out, prm_err_t *err);
void prm_gguf_close(prm_gguf_file_t *f);
const char *prm_gguf_path(const prm_gguf_file_t *f);
uint32_t prm_gguf_version(const prm_gguf_file_t *f);
uint32_t prm_gguf_alignment(const prm_gguf_file_t *f);
int64_t prm_gguf_kv_count(const prm_gguf_file_t *f);
const prm_gguf_kv_t *prm_gguf_kv_at(const prm_gguf_file_t *f, int64_t i);
const prm_gguf_kv_t *prm_gguf_find_kv(const prm_gguf_file_t *f, const char *key); /* or NULL */
int64_t prm_gguf_tensor_count(const prm_gguf_file_t *f);
const prm_gguf_tensor_t *prm_gguf_tensor_at(const prm_gguf_file_t *f, int64_t i);
const prm_gguf_tensor_t *prm_gguf_find_tensor(const prm_gguf_file_t *f, const char *name);
/* Element i of a numeric array as an integer / a double; 0 on success, -1
 * when kv is not a numeric array, the element is not integral (_i64), or i
 * is out of range. */
int prm_gguf_arr_i64(const prm_gguf_kv_t *kv, uint64_t i, int64_t *out);
int prm_gguf_arr_f64(const prm_gguf_kv_t *kv, uint64_t i, double *out);
/* Typed look-ups that name the file and key in their errors: a missing key
 * (PRM_EPARSE "path: missing key K"), or a value of another kind ("key K:
 * expected an unsigned integer, got string"). Any integer type is accepted
 * by _uint when it is >= 0, F32/F64 by _float. */
int prm_gguf_get_uint(const prm_gguf_file_t *f, const char *key, uint64_t *out, prm_err_t *err);
int prm_gguf_get_float(const prm_gguf_file_t *f, const char *key, double *out, prm_err_t *err);
int prm_gguf_get_str(const prm_gguf_file_t *f, const char *key, const char **out, prm_err_t *err);
/* Copies a tensor into dst as f32 (F16 widened exactly); numel != n is
 * PRM_EINVAL naming the file and tensor. */
int prm_gguf_read_f32(const prm_gguf_file_t *f, const prm_gguf_tensor_t *t, float *dst, int64_t n,
                      prm_err_t *err);

/* ---- the Llama layout -------------------------------------------------- */

/* Hugging Face's Llama rotates the two halves of each head (rotate-half);
 * llama.cpp's llama architecture rotates adjacent pairs. The q_proj/k_proj
 * rows (n_head * head_dim rows of `cols`) are permuted so both compute the
 * same function: viewed as (n_head, 2, head_dim/2, cols), axes 1 and 2 are
 * swapped (convert_hf_to_gguf.py's permute). inverse = 1 undoes it. dst
 * and src must not overlap; head_dim must be even. */
void prm_gguf_permute_qk(float *dst /* (n_head*head_dim, cols) */,
                         const float *src /* (n_head*head_dim, cols) */, int64_t n_head,
                         int64_t head_dim, int64_t cols, int inverse);

/* GPT-2's byte-to-unicode table: the UTF-8 text (1 or 2 bytes plus NUL) of
 * the character byte b stands for in byte-level BPE vocabularies. */
void prm_gguf_byte_token(int b, char out[4]);

#ifdef __cplusplus
}
#endif
#endif /* PRM_IO_H */
