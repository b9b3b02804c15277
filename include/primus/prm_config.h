/* prm_config.h - experiment configuration: a YAML tree that remembers where
 * every value came from (file:line), `extends:` chains, ${VAR} and
 * ${VAR:default} expansion, module and model presets, CLI overrides, and a
 * schema of Megatron-LM key names that validates every key and type.
 *
 * Precedence, lowest to highest:
 *   extends chain < module preset ∪ model preset < `overrides:` < CLI.
 */
#ifndef PRM_CONFIG_H
#define PRM_CONFIG_H

#include "primus/prm_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* YAML tree                                                                 */
/* ------------------------------------------------------------------------ */

typedef enum {
  PRM_NODE_NULL,   /* `~`, `null` or an empty value */
  PRM_NODE_SCALAR, /* text; typed later by the schema */
  PRM_NODE_MAP,    /* ordered keys */
  PRM_NODE_LIST,
} prm_node_kind_t;

/* A node owns its children, keys, text and origin. `file` is the path as
 * given when loaded, or a label such as "<cli>" or "<env>". */
typedef struct prm_node {
  prm_node_kind_t kind;
  char *str;               /* SCALAR: the text (NUL-terminated) */
  int quoted;              /* SCALAR: was quoted in YAML (stays a string) */
  char **keys;             /* MAP: n keys */
  struct prm_node **items; /* MAP: n values; LIST: n items */
  int n, cap;
  char *file;              /* origin */
  int line;                /* 1-based; 0 when not from a file */
} prm_node_t;

/* Parses YAML text (block and flow style, anchors/aliases are an error).
 * Errors read "file:line: message". Duplicate keys in one map are an error.
 * The caller frees *out with prm_node_free. */
int prm_yaml_parse(const char *text, size_t len, const char *file,
                   prm_node_t **out, prm_err_t *err);
int prm_yaml_load(const char *path, prm_node_t **out, prm_err_t *err);
/* Emits a tree as block-style YAML. With origins, every scalar line gets a
 * trailing comment "# file:line". Strings that would re-parse as another
 * type or contain special characters are quoted. */
void prm_yaml_emit(const prm_node_t *n, prm_sb_t *out, int origins);

prm_node_t *prm_node_new(prm_node_kind_t kind, const char *file, int line);
prm_node_t *prm_node_new_scalar(const char *str, const char *file, int line);
void prm_node_free(prm_node_t *n);
prm_node_t *prm_node_clone(const prm_node_t *n);
/* MAP look-up by exact key; NULL when absent or n is not a map. */
prm_node_t *prm_node_get(const prm_node_t *map, const char *key);
/* Dotted path look-up ("modules.pre_trainer.model"). */
prm_node_t *prm_node_path(const prm_node_t *root, const char *dotted);
/* Sets (replacing) map[key] = val; takes ownership of val. */
void prm_node_set(prm_node_t *map, const char *key, prm_node_t *val);
/* Sets a dotted path, creating maps on the way; takes ownership of val. */
void prm_node_set_path(prm_node_t *root, const char *dotted, prm_node_t *val);
int prm_node_remove(prm_node_t *map, const char *key); /* 1 when removed */
void prm_node_push(prm_node_t *list, prm_node_t *item); /* takes ownership */
/* Deep merge: maps merge key by key, anything else in src replaces dst.
 * src is not modified (values are cloned). */
void prm_node_merge(prm_node_t *dst, const prm_node_t *src);
/* Expands ${VAR} (required: missing is an error naming file:line and the
 * variable) and ${VAR:default} in every scalar, from env (NULL: the process
 * environment). "$${" stays a literal "${". */
int prm_node_expand_env(prm_node_t *n, const prm_env_t *env, prm_err_t *err);

/* ------------------------------------------------------------------------ */
/* Schema: every key primus understands                                      */
/* ------------------------------------------------------------------------ */

typedef enum {
  PRM_T_INT,
  PRM_T_FLOAT,
  PRM_T_BOOL,
  PRM_T_STR,
  PRM_T_ENUM,        /* STR limited to `choices` */
  PRM_T_STR_OR_LIST, /* data_path: "prefix" or [w1, p1, w2, p2] */
  PRM_T_INT_OR_LIST, /* moe_layer_freq: k or [1, 0, 1, 0] (each item 0 or 1) */
  PRM_T_MAP,         /* free-form map (env:) */
  PRM_T_ANY,         /* any value (keys accepted without effect here) */
  PRM_T__COUNT
} prm_type_t;

/* What a key does in primus. Megatron-LM and Primus know hundreds of
 * arguments; primus implements the ones that decide what its engine
 * computes, accepts the ones that only steer logging services or other
 * engines' kernels, and refuses the ones that would change the mathematics
 * in a way its engine does not implement (unless they keep their neutral
 * value). */
typedef enum {
  PRM_KEY_RUN,         /* implemented: changes what a run computes or writes */
  PRM_KEY_INERT,       /* accepted; no effect here (logging services, fused kernels) */
  PRM_KEY_UNSUPPORTED, /* accepted only at a value in `ok`; anything else is an error */
} prm_key_class_t;

typedef struct {
  const char *key;     /* dotted for nested native keys: "fault_tolerance.max_restarts" */
  prm_type_t type;
  double min, max;     /* inclusive range for INT/FLOAT when min < max */
  const char *choices; /* ENUM: "cosine|linear|constant" */
  int nullable;        /* null is allowed (e.g. load, save) */
  int native;          /* 1: primus' own key (Megatron has no equivalent) */
  const char *help;    /* UNSUPPORTED: the feature primus' engine lacks */
  prm_key_class_t cls;
  const char *ok;      /* UNSUPPORTED: values primus computes with, "false|null" */
} prm_key_t;

/* The module-key table (Megatron names plus documented native keys): the
 * keys primus implements, each with a default in the module preset. */
const prm_key_t *prm_schema_keys(int *count);
/* Megatron-LM and Primus argument names primus accepts without
 * implementing them: PRM_KEY_INERT and PRM_KEY_UNSUPPORTED entries. Names
 * ending in '*' are prefixes ("wandb_*"). */
const prm_key_t *prm_schema_compat_keys(int *count);
/* Either table; a prefix entry matches every key with that prefix. */
const prm_key_t *prm_schema_find(const char *key);
const char *prm_type_name(prm_type_t t);

/* ------------------------------------------------------------------------ */
/* Resolved experiment                                                       */
/* ------------------------------------------------------------------------ */

typedef struct prm_exp prm_exp_t;

/* One CLI override: key may be a module key ("lr", "fault_tolerance.x"), a
 * top-level key ("exp_name", "workspace"), or a full path
 * ("modules.pre_trainer.lr"). */
typedef struct {
  const char *key, *value;
} prm_override_t;

/* Loads and resolves an experiment file:
 *  1. the file and its `extends:` chain (scalar or list; paths relative to
 *     the file that names them; merged in order, the file itself wins;
 *     cycles are an error),
 *  2. ${VAR} expansion,
 *  3. for the chosen module (`module`: "pre_trainer", "post_trainer", or
 *     NULL for the first module present): the module preset named by
 *     `config:` (configs/modules/<framework>/<name>, .yaml optional) merged
 *     with the model preset named by `model:` (configs/models/<framework>/),
 *     then `overrides:`, then the CLI overrides,
 *  4. validation of every key against the schema (unknown keys get a "did
 *     you mean"), types coerced, ranges checked; errors read
 *     "file:line: key: expected ..., got ...". Every problem of the keys
 *     is reported, one a line, after a count ("3 problems:"), not only the
 *     first.
 * Presets are searched in prm_home()/configs. *out is freed with
 * prm_exp_free. */
int prm_exp_load(const char *path, const prm_override_t *ov, int nov,
                 const char *module, prm_exp_t **out, prm_err_t *err);
void prm_exp_free(prm_exp_t *e);

/* Top-level experiment fields, with defaults when absent:
 * work_group ("default"), user_name ($USER or "user"), exp_name (file stem),
 * workspace ("./output"). */
const char *prm_exp_top(const prm_exp_t *e, const char *key);
const char *prm_exp_module(const prm_exp_t *e); /* "pre_trainer" */
/* The module's `framework:` ("native" or "megatron"; both run primus'
 * engine, megatron with Megatron-LM's argument semantics). */
const char *prm_exp_framework(const prm_exp_t *e);
/* Keys the experiment (its `overrides:` or the command line) sets that
 * have no effect in primus (PRM_KEY_INERT), in the order set. */
const prm_argv_t *prm_exp_ignored(const prm_exp_t *e);
/* Logs, once per call, the framework line and the one warning line that
 * lists the keys without effect (nothing when there are none). */
void prm_exp_announce(const prm_exp_t *e);
/* The experiment's `env:` map (NULL when absent). */
const prm_node_t *prm_exp_env(const prm_exp_t *e);

/* Typed getters for module keys; PRM_EUNKNOWN when the key is not set,
 * PRM_EINVAL when it has another type. Values are already validated. */
const prm_node_t *prm_exp_get(const prm_exp_t *e, const char *key);
int prm_exp_get_int(const prm_exp_t *e, const char *key, int64_t *out);
int prm_exp_get_f64(const prm_exp_t *e, const char *key, double *out);
int prm_exp_get_bool(const prm_exp_t *e, const char *key, int *out);
const char *prm_exp_get_str(const prm_exp_t *e, const char *key); /* NULL if unset/null */
/* "file:line", "<cli>" ... for a module key; NULL when unset. */
char *prm_exp_origin(const prm_exp_t *e, const char *key); /* caller frees */

/* Every file read while resolving (experiment, extends chain, presets), as
 * absolute paths, in reading order. */
const prm_argv_t *prm_exp_inputs(const prm_exp_t *e);

/* The resolved experiment as YAML in the experiment layout, loadable again
 * by prm_exp_load with the same result (module keys under `overrides:`,
 * `config:`/`model:` kept for the record). With origins, each value carries
 * a "# file:line" comment (this is `primus config show`). */
void prm_exp_dump(const prm_exp_t *e, prm_sb_t *out, int origins);
int prm_exp_write(const prm_exp_t *e, const char *path, prm_err_t *err);

/* Parameter count of the Llama-family model the keys describe (embedding,
 * layers with q/k/v biases (add_qkv_bias), q/k norms (qk_layernorm),
 * kv_channels, MoE experts, routers and shared experts where set, final
 * norm, untied head), for size checks and MFU. */
int prm_exp_model_params(const prm_exp_t *e, int64_t *out, prm_err_t *err);

#ifdef __cplusplus
}
#endif
#endif /* PRM_CONFIG_H */
