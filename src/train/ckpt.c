/* ckpt.c - model checkpoints in the Hugging Face layout (config.json +
 * model.safetensors, f32, HF tensor names) inside Megatron's folder scheme
 * (SAVE/iter_NNNNNNN/, SAVE/latest_checkpointed_iteration.txt). A folder
 * is built under a temporary name and renamed into place, so a reader never
 * sees half a checkpoint. */
#define _GNU_SOURCE
#include "train-impl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Configuration <-> config.json                                             */
/* ------------------------------------------------------------------------ */

static void prm__to_hf(const prm_llama_config_t *c, const char *tokenizer_type,
                       prm_hf_config_t *h) {
  memset(h, 0, sizeof *h);
  h->hidden_size = c->hidden;
  h->intermediate_size = c->ffn;
  h->num_attention_heads = c->heads;
  h->num_key_value_heads = c->groups;
  h->num_hidden_layers = c->layers;
  h->vocab_size = c->vocab;
  h->max_position_embeddings = c->max_pos;
  h->rms_norm_eps = c->norm_eps;
  h->rope_theta = c->rope_base;
  h->tie_word_embeddings = c->tied;
  h->head_dim = c->head_dim;
  h->qkv_bias = c->qkv_bias;
  h->qk_norm = c->qk_norm;
  if (c->rope_factor > 0) {
    h->rope_factor = c->rope_factor;
    h->rope_low = c->rope_low;
    h->rope_high = c->rope_high;
    h->rope_orig = c->rope_orig;
  }
  if (c->experts) { /* Mixtral: intermediate_size is an expert's */
    h->intermediate_size = c->moe_ffn;
    h->num_local_experts = c->experts;
    h->num_experts_per_tok = c->topk;
    h->moe_layer_freq = c->moe_freq;
    h->moe_layers_n = c->moe_list_n <= PRM_HF_MOE_LAYERS_MAX ? c->moe_list_n : 0;
    for (int64_t l = 0; l < h->moe_layers_n; l++) h->moe_layers[l] = (uint8_t)prm_llama_is_moe(c, l);
    h->dense_intermediate_size = c->ffn;
    h->shared_expert_intermediate_size = c->shared_ffn;
  }
  h->bos_token_id = h->eos_token_id = -1;
  snprintf(h->tokenizer_type, sizeof h->tokenizer_type, "%s", tokenizer_type ? tokenizer_type : "");
}

int prm_ckpt_read_config(const char *dir, prm_llama_config_t *c, char *tokenizer_type,
                         size_t tokenizer_len, prm_err_t *err) {
  char *path = prm_path_join(dir, "config.json");
  prm_hf_config_t h;
  int rc = prm_hf_config_read(path, &h, err);
  free(path);
  if (rc) return rc;
  memset(c, 0, sizeof *c);
  c->hidden = h.hidden_size;
  c->ffn = h.intermediate_size;
  c->heads = h.num_attention_heads;
  c->groups = h.num_key_value_heads;
  c->layers = h.num_hidden_layers;
  c->vocab = h.vocab_size;
  c->max_pos = h.max_position_embeddings;
  c->norm_eps = h.rms_norm_eps;
  c->rope_base = h.rope_theta;
  c->tied = h.tie_word_embeddings;
  c->head_dim = h.head_dim;
  if (c->head_dim && c->heads && c->hidden % c->heads == 0 && c->head_dim == c->hidden / c->heads)
    c->head_dim = 0; /* the default width, spelt out */
  c->qkv_bias = h.qkv_bias;
  c->qk_norm = h.qk_norm;
  c->rope_factor = h.rope_factor;
  c->rope_low = h.rope_low;
  c->rope_high = h.rope_high;
  c->rope_orig = h.rope_orig;
  if (h.num_local_experts > 0) {
    c->experts = h.num_local_experts;
    c->topk = h.num_experts_per_tok;
    c->moe_ffn = h.intermediate_size;
    c->ffn = h.dense_intermediate_size;
    c->moe_freq = h.moe_layer_freq;
    if (h.moe_layers_n > 0) {
      int on[PRM_HF_MOE_LAYERS_MAX];
      for (int64_t l = 0; l < h.moe_layers_n; l++) on[l] = h.moe_layers[l];
      prm_llama_set_moe_list(c, on, h.moe_layers_n);
    }
    c->shared_ffn = h.shared_expert_intermediate_size;
  }
  if (tokenizer_type && tokenizer_len) snprintf(tokenizer_type, tokenizer_len, "%s", h.tokenizer_type);
  if ((rc = prm_llama_config_check(c, err))) {
    prm_err_prefix(err, "%s/config.json", dir);
    return rc;
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                   */
/* ------------------------------------------------------------------------ */

/* Copies a HuggingFaceTokenizer's tokenizer.json (the file or its folder)
 * into dir. */
static int prm__copy_tokenizer(const char *model, const char *dir, prm_err_t *err) {
  char *src = prm_fs_is_dir(model) ? prm_path_join(model, "tokenizer.json") : prm_xstrdup(model);
  char *dst = prm_path_join(dir, "tokenizer.json");
  int rc = prm_fs_copy(src, dst, err);
  free(dst);
  free(src);
  return rc;
}

/* The text of one token id, NULL-safe (caller frees; NULL for id < 0). */
static char *prm__token_text(const prm_tokenizer_t *t, int32_t id) {
  if (id < 0) return NULL;
  prm_sb_t sb = {0};
  prm_tokenizer_decode(t, &id, 1, &sb);
  return prm_sb_steal(&sb);
}

int prm__tokenizer_config(const prm_train_opts_t *o, char **out, prm_err_t *err) {
  *out = NULL;
  if (!o->tokenizer_model || !prm_streq(o->tokenizer_type, "HuggingFaceTokenizer")) return 0;
  prm_tokenizer_t *t = NULL;
  int rc = prm_tokenizer_open(o->tokenizer_type, o->tokenizer_model, &t, err);
  if (rc) return rc;
  /* Llama-3 tokenizers end a turn with <|eot_id|> and begin with
   * <|begin_of_text|>; GPT-2-style ones use their EOD token for both. */
  int32_t eos_id = prm_tokenizer_eod(t), bos_id = prm_tokenizer_token_to_id(t, "<|begin_of_text|>");
  if (o->sft && o->chat == PRM_CHAT_LLAMA3 && prm_tokenizer_token_to_id(t, "<|eot_id|>") >= 0)
    eos_id = prm_tokenizer_token_to_id(t, "<|eot_id|>");
  char *eos = prm__token_text(t, eos_id), *bos = prm__token_text(t, bos_id >= 0 ? bos_id : eos_id);
  /* The default template ends a turn with the EOD token (chat.c). */
  char *eod = prm__token_text(t, prm_tokenizer_eod(t));
  prm_tokenizer_free(t);
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "tokenizer_class", "PreTrainedTokenizerFast");
  if (bos) cJSON_AddStringToObject(root, "bos_token", bos);
  else cJSON_AddNullToObject(root, "bos_token");
  if (eos) cJSON_AddStringToObject(root, "eos_token", eos);
  else cJSON_AddNullToObject(root, "eos_token");
  cJSON_AddNumberToObject(root, "model_max_length", (double)o->model.max_pos);
  cJSON_AddBoolToObject(root, "add_bos_token", 0);
  cJSON_AddBoolToObject(root, "add_eos_token", 0);
  cJSON_AddBoolToObject(root, "clean_up_tokenization_spaces", 0);
  if (o->sft) {
    char *jinja = prm_chat_jinja(o->chat, eod);
    cJSON_AddStringToObject(root, "chat_template", jinja);
    free(jinja);
  }
  free(eod);
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  free(bos);
  free(eos);
  prm_sb_t sb = {0};
  prm_sb_append(&sb, text);
  prm_sb_putc(&sb, '\n');
  cJSON_free(text);
  *out = prm_sb_steal(&sb);
  return 0;
}

int prm__ckpt_write_model(const prm_llama_t *m, const char *dir, const char *tokenizer_type,
                          const char *tokenizer_model, const char *tokenizer_config,
                          prm_err_t *err) {
  float *owned = NULL; /* a device model's parameters, copied to the host */
  const float *params = prm_llama_params_view(m, &owned, err);
  if (!params) return err ? err->code : PRM_ERUNTIME;
  prm_st_entry_t *ent = prm_xcalloc((size_t)m->ntensors, sizeof *ent);
  for (int i = 0; i < m->ntensors; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    ent[i].name = t->name;
    ent[i].data = params + t->offset;
    ent[i].ndim = t->ndim;
    ent[i].shape[0] = t->shape[0];
    ent[i].shape[1] = t->shape[1];
  }
  const char *meta[] = {"format", "pt", "producer", "primus " PRM_VERSION, NULL};
  char *st = prm_path_join(dir, "model.safetensors");
  int rc = prm_st_write_f32(st, ent, m->ntensors, meta, err);
  free(st);
  free(ent);
  free(owned);
  if (rc) return rc;
  prm_hf_config_t h;
  prm__to_hf(&m->cfg, tokenizer_type, &h);
  char *cj = prm_path_join(dir, "config.json");
  rc = prm_hf_config_write(cj, &h, err);
  free(cj);
  if (!rc && tokenizer_model && prm_streq(tokenizer_type, "HuggingFaceTokenizer"))
    rc = prm__copy_tokenizer(tokenizer_model, dir, err);
  if (!rc && tokenizer_config) {
    char *path = prm_path_join(dir, "tokenizer_config.json");
    rc = prm_fs_write_atomic(path, tokenizer_config, strlen(tokenizer_config), err);
    free(path);
  }
  return rc;
}

int prm__ckpt_commit(const char *tmp, const char *dir, prm_err_t *err) {
  char *parent = prm_path_dirname(dir);
  int rc = prm_fs_fsync_dir(tmp, err);
  if (rc) goto fail_tmp;
  if (prm_fs_exists(dir)) {
    /* Replacing a folder: move the old one aside first, drop it after. */
    char *old = prm_xasprintf("%s.old.%d", dir, (int)getpid());
    if (rename(dir, old)) {
      rc = prm_errf(err, PRM_EIO, "%s: cannot replace: %s", dir, strerror(errno));
      free(old);
      goto fail_tmp;
    }
    if (rename(tmp, dir)) {
      rc = prm_errf(err, PRM_EIO, "%s: rename: %s", dir, strerror(errno));
      if (rename(old, dir)) PRM_WARN("%s: old checkpoint left at %s", dir, old);
      free(old);
      goto fail_tmp;
    }
    prm_fs_rm_rf(old);
    free(old);
  } else if (rename(tmp, dir)) {
    rc = prm_errf(err, PRM_EIO, "%s: rename: %s", dir, strerror(errno));
    goto fail_tmp;
  }
  rc = prm_fs_fsync_dir(parent, err);
  free(parent);
  return rc;
fail_tmp:
  prm_fs_rm_rf(tmp);
  free(parent);
  return rc;
}

int prm__ckpt_mktemp(const char *dir, int pid, char **tmp, prm_err_t *err) {
  char *parent = prm_path_dirname(dir);
  *tmp = prm_xasprintf("%s.tmp.%d", dir, pid);
  int rc = prm_fs_mkdir_p(parent, 0755, err);
  free(parent);
  if (rc) return rc;
  prm_fs_rm_rf(*tmp);
  return prm_fs_mkdir_p(*tmp, 0755, err);
}

int prm_ckpt_write_hf(const prm_llama_t *m, const char *dir, const char *tokenizer_type,
                      const char *tokenizer_model, const prm_ckpt_state_t *st, prm_err_t *err) {
  char *tmp = NULL;
  int rc = prm__ckpt_mktemp(dir, (int)getpid(), &tmp, err);
  if (rc) goto done;
  if ((rc = prm__ckpt_write_model(m, tmp, tokenizer_type, tokenizer_model,
                                  st ? st->tokenizer_config : NULL, err)))
    goto fail_tmp;
  if (st && ((rc = prm__state_write(tmp, m, st, err)) || (rc = prm__state_done(tmp, err))))
    goto fail_tmp;
  rc = prm__ckpt_commit(tmp, dir, err); /* removes tmp on failure */
  goto done;
fail_tmp:
  prm_fs_rm_rf(tmp);
done:
  free(tmp);
  return rc;
}

/* Leftovers of saves cut short (crash, SIGKILL, full disk) by a process
 * that is gone: iter_N.tmp.PID is half a checkpoint and goes; iter_N.old.PID
 * is a complete older copy, put back when iter_N is missing. */
void prm__ckpt_clean_leftovers(const char *save) {
  prm_argv_t names = {0};
  prm_err_t e = {0};
  if (!prm_fs_is_dir(save) || prm_fs_list_dir(save, &names, &e)) return;
  for (int i = 0; i < names.n; i++) {
    const char *n = names.v[i], *dot = strchr(n, '.');
    if (!prm_startswith(n, "iter_") || !dot) continue;
    int tmp = prm_startswith(dot, ".tmp."), old = prm_startswith(dot, ".old.");
    int64_t pid;
    if ((!tmp && !old) || prm_parse_i64(dot + 5, &pid) || pid <= 0) continue;
    if (pid == getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char *path = prm_path_join(save, n), *base = prm_xstrndup(n, (size_t)(dot - n));
    char *dir = prm_path_join(save, base);
    if (old && !prm_fs_exists(dir) && rename(path, dir) == 0) {
      PRM_WARN("%s: put back as %s (a replacement cut short)", path, dir);
    } else {
      PRM_WARN("%s: removed (a save cut short by process %lld)", path, (long long)pid);
      prm_fs_rm_rf(path);
    }
    free(dir);
    free(base);
    free(path);
  }
  prm_argv_free(&names);
}

int prm__ckpt_failed(const char *save, int64_t iter, int rc, prm_err_t *err) {
  /* Say what is still there: nothing the failed save touched is used. */
  char *prev = NULL;
  int64_t it = 0;
  prm_err_t e = {0};
  if (err && prm_ckpt_resolve(save, &prev, &it, &e) == 0 && it > 0) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    prm_errf(err, rc, "checkpoint of iteration %lld not saved: %s; the previous one, %s, is "
             "intact", (long long)iter, msg, prev);
  } else if (err) {
    prm_err_prefix(err, "checkpoint of iteration %lld not saved", (long long)iter);
  }
  free(prev);
  return rc;
}

char *prm__ckpt_iter_dir(const char *save, int64_t iter) {
  char name[32];
  snprintf(name, sizeof name, "iter_%07lld", (long long)iter);
  return prm_path_join(save, name);
}

int prm__ckpt_latest(const char *save, int64_t iter, prm_err_t *err) {
  char text[32];
  int n = snprintf(text, sizeof text, "%lld\n", (long long)iter);
  char *latest = prm_path_join(save, "latest_checkpointed_iteration.txt");
  int rc = prm_fs_write_atomic(latest, text, (size_t)n, err);
  free(latest);
  return rc;
}

int prm_ckpt_save(const prm_llama_t *m, const char *save, int64_t iter,
                  const char *tokenizer_type, const char *tokenizer_model,
                  const prm_ckpt_state_t *st, prm_err_t *err) {
  prm__ckpt_clean_leftovers(save);
  char *dir = prm__ckpt_iter_dir(save, iter);
  int rc = prm_ckpt_write_hf(m, dir, tokenizer_type, tokenizer_model, st, err);
  free(dir);
  if (rc) return prm__ckpt_failed(save, iter, rc, err);
  return prm__ckpt_latest(save, iter, err);
}

/* ------------------------------------------------------------------------ */
/* Reading                                                                   */
/* ------------------------------------------------------------------------ */

int prm_ckpt_resolve(const char *load, char **dir, int64_t *iter, prm_err_t *err) {
  *dir = NULL;
  *iter = 0;
  if (!prm_fs_is_dir(load))
    return prm_errf(err, PRM_ENOENT, "load: %s: no such folder", load);
  char *latest = prm_path_join(load, "latest_checkpointed_iteration.txt");
  if (!prm_fs_exists(latest)) {
    free(latest);
    *dir = prm_xstrdup(load);
    return 0;
  }
  char *text = NULL;
  int rc = prm_fs_read_all(latest, &text, NULL, err);
  if (rc) {
    free(latest);
    return rc;
  }
  int64_t it;
  if (prm_parse_i64(prm_strtrim(text), &it) || it < 0) {
    rc = prm_errf(err, PRM_EPARSE, "%s: expected an iteration number, got \"%s\"", latest, text);
  } else {
    char name[32];
    snprintf(name, sizeof name, "iter_%07lld", (long long)it);
    *dir = prm_path_join(load, name);
    *iter = it;
    if (!prm_fs_is_dir(*dir)) {
      rc = prm_errf(err, PRM_ENOENT, "%s names iteration %lld but %s does not exist", latest,
                    (long long)it, *dir);
      free(*dir);
      *dir = NULL;
    }
  }
  free(text);
  free(latest);
  return rc;
}

static void prm__shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
  size_t len = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < ndim && len < n; d++)
    len += (size_t)snprintf(buf + len, n - len, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (len < n) snprintf(buf + len, n - len, "]");
}

int prm_ckpt_load_hf(prm_llama_t *m, const char *dir, prm_err_t *err) {
  if (!prm_llama_on_host(m)) /* prm__load_weights stages through a host twin */
    return prm_errf(err, PRM_EINTERNAL, "%s: prm_ckpt_load_hf reads into host memory; the model "
                    "is on %s", dir, m->dev->i->name);
  prm_llama_config_t c;
  int rc = prm_ckpt_read_config(dir, &c, NULL, 0, err);
  if (rc) return rc;
  int all_moe = m->cfg.experts > 0;
  for (int64_t l = 0; l < m->cfg.layers; l++) all_moe &= prm_llama_is_moe(&m->cfg, l);
  struct {
    const char *key;
    int64_t have, want;
  } keys[] = {{"hidden_size", c.hidden, m->cfg.hidden},
              /* (an all-MoE model has no dense layer: any size goes) */
              {"intermediate_size (ffn_hidden_size)", c.ffn,
               all_moe ? c.ffn : m->cfg.ffn},
              {"num_attention_heads", c.heads, m->cfg.heads},
              {"num_key_value_heads (num_query_groups)", c.groups, m->cfg.groups},
              {"num_hidden_layers (num_layers)", c.layers, m->cfg.layers},
              {"vocab_size", c.vocab, m->cfg.vocab},
              {"tie_word_embeddings (!untie_embeddings_and_output_weights)", c.tied, m->cfg.tied},
              {"head_dim (kv_channels)", prm_llama_head_dim(&c), prm_llama_head_dim(&m->cfg)},
              {"q/k/v biases (add_qkv_bias; model_type qwen2)", c.qkv_bias, m->cfg.qkv_bias},
              {"q/k norms (qk_layernorm; model_type qwen3)", c.qk_norm, m->cfg.qk_norm},
              {"num_local_experts (num_experts)", c.experts, m->cfg.experts},
              {"num_experts_per_tok (moe_router_topk)", c.topk, m->cfg.experts ? m->cfg.topk : 0},
              {"intermediate_size (moe_ffn_hidden_size)", c.moe_ffn,
               m->cfg.experts ? m->cfg.moe_ffn : 0},
              {"shared_expert_intermediate_size (moe_shared_expert_intermediate_size)",
               c.shared_ffn, m->cfg.experts ? m->cfg.shared_ffn : 0}};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (keys[i].have != keys[i].want)
      return prm_errf(err, PRM_ECONFIG, "%s/config.json: %s is %lld but the experiment has %lld",
                      dir, keys[i].key, (long long)keys[i].have, (long long)keys[i].want);
  /* Which layers are MoE (moe_layer_freq as an int or a list). */
  for (int64_t l = 0; l < c.layers && m->cfg.experts; l++)
    if (prm_llama_is_moe(&c, l) != prm_llama_is_moe(&m->cfg, l))
      return prm_errf(err, PRM_ECONFIG,
                      "%s/config.json: layer %lld is %s but the experiment's moe_layer_freq makes "
                      "it %s", dir, (long long)l, prm_llama_is_moe(&c, l) ? "MoE" : "dense",
                      prm_llama_is_moe(&m->cfg, l) ? "MoE" : "dense");

  /* Scalars that change the function but not the shapes: the experiment
   * wins, but a difference is worth a line. */
  if (c.rope_base != m->cfg.rope_base)
    PRM_WARN("%s/config.json: rope_theta %g differs from the experiment's rotary_base %g; using %g",
             dir, c.rope_base, m->cfg.rope_base, m->cfg.rope_base);
  if (c.rope_factor != m->cfg.rope_factor || (c.rope_factor > 0 &&
      (c.rope_low != m->cfg.rope_low || c.rope_high != m->cfg.rope_high ||
       c.rope_orig != m->cfg.rope_orig)))
    PRM_WARN("%s/config.json: rope_scaling (factor %g) differs from the experiment's (factor %g, "
             "use_rope_scaling); using the experiment's", dir, c.rope_factor, m->cfg.rope_factor);
  if (c.norm_eps != m->cfg.norm_eps)
    PRM_WARN("%s/config.json: rms_norm_eps %g differs from the experiment's norm_epsilon %g; using %g",
             dir, c.norm_eps, m->cfg.norm_eps, m->cfg.norm_eps);
  if (c.max_pos < m->cfg.max_pos)
    PRM_WARN("%s/config.json: max_position_embeddings %lld is below the experiment's %lld",
             dir, (long long)c.max_pos, (long long)m->cfg.max_pos);

  prm_hf_weights_t *w = NULL;
  if ((rc = prm_hf_weights_open(dir, &w, err))) return rc;
  for (int i = 0; i < m->ntensors && !rc; i++) {
    const prm_tensor_t *t = &m->tensors[i];
    const char *file = NULL;
    const prm_st_tensor_t *s = prm_hf_weights_find(w, t->name, &file);
    /* A pipeline stage reads its own tensors; another stage's (absent
     * here) are checked whole and skipped. */
    const int64_t *shape = t->numel == 0 ? t->full_shape : t->shape;
    char want[64], got[64];
    prm__shape_str(want, sizeof want, t->ndim, shape);
    if (!s) {
      rc = prm_errf(err, PRM_EPARSE, "%s: missing tensor \"%s\" (shape %s)", dir, t->name, want);
      break;
    }
    int same = s->ndim == t->ndim && s->shape[0] == shape[0] &&
               (t->ndim == 1 || s->shape[1] == shape[1]);
    if (!same) {
      prm__shape_str(got, sizeof got, s->ndim, s->shape);
      rc = prm_errf(err, PRM_EPARSE, "%s: tensor \"%s\" has shape %s, the model needs %s", file,
                    t->name, got, want);
      break;
    }
    if (t->numel && (rc = prm_st_read_f32(s, m->params + t->offset, t->numel, err))) {
      prm_err_prefix(err, "%s", file);
      break;
    }
  }
  if (!rc && m->cfg.tied && prm_hf_weights_find(w, "lm_head.weight", NULL))
    PRM_WARN("%s: lm_head.weight ignored: the model ties the head to the embedding", dir);
  prm_hf_weights_close(w);
  return rc;
}
