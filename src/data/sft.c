/* sft.c - supervised fine-tuning data: a JSONL file of examples
 * ({"prompt", "response"} or {"messages": [{"role", "content"}]}) read and
 * tokenised once at open through a chat template (chat.c), divided into
 * train/valid/test by `split` over the examples in file order (as the
 * pre-training data divides documents), each split's examples put in an
 * order drawn from the seed, then packed greedily into sequences of
 * seq_length positions (or one per sequence when packing is off). Every
 * sample is then a pure function of (split, k): the run is deterministic
 * and a resumed run reads the same sequences. */
#define _GNU_SOURCE
#include "data/data-impl.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int64_t nex;       /* examples in the split */
  int64_t *order;    /* (nex) example indices in reading order */
  int64_t nseq;      /* sequences */
  int64_t *first;    /* (nseq + 1) sequence q holds order[first[q] .. first[q+1]) */
  int64_t *loss;     /* (nseq) loss tokens of each sequence */
  int64_t loss_total;
} prm__sft_split_t;

struct prm_sft {
  int32_t *tok;       /* every example's tokens, concatenated */
  uint8_t *mask;      /* 1: a loss token */
  int64_t *off, *len; /* (nex) each example's tokens (len <= S + 1) */
  int64_t nex, S;
  int32_t pad;
  int64_t truncated, dropped;
  int shuffle;
  uint64_t seed;
  prm__sft_split_t sp[PRM_SPLIT__COUNT];
  char *desc;
};

/* ------------------------------------------------------------------------ */
/* Reading                                                                   */
/* ------------------------------------------------------------------------ */

/* The messages of one JSON line (pointing into root); *n = 0 with an
 * error message in err when the shape is wrong. */
static int prm__sft_messages(const cJSON *root, prm_chat_msg_t **msgs, int *n, prm_err_t *err) {
  *n = 0;
  if (!cJSON_IsObject(root)) return prm_errf(err, PRM_EPARSE, "expected a JSON object");
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "messages");
  if (m) {
    if (!cJSON_IsArray(m) || !m->child)
      return prm_errf(err, PRM_EPARSE, "\"messages\": expected a non-empty array");
    int cnt = cJSON_GetArraySize(m), i = 0, asst = 0;
    *msgs = prm_xrealloc(*msgs, (size_t)cnt * sizeof **msgs);
    for (const cJSON *e = m->child; e; e = e->next, i++) {
      const cJSON *r = cJSON_GetObjectItemCaseSensitive(e, "role");
      const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
      if (!cJSON_IsObject(e) || !cJSON_IsString(r) || !cJSON_IsString(c))
        return prm_errf(err, PRM_EPARSE,
                        "messages[%d]: expected {\"role\": string, \"content\": string}", i);
      const char *role = r->valuestring;
      if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant"))
        return prm_errf(err, PRM_EPARSE,
                        "messages[%d]: unknown role \"%s\" (expected system, user or assistant)",
                        i, role);
      asst |= !strcmp(role, "assistant");
      (*msgs)[i] = (prm_chat_msg_t){role, c->valuestring};
    }
    if (!asst)
      return prm_errf(err, PRM_EPARSE, "no assistant message (nothing to learn from)");
    *n = cnt;
    return 0;
  }
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "response");
  if (!p && !r)
    return prm_errf(err, PRM_EPARSE, "expected \"prompt\" and \"response\", or \"messages\"");
  if (!cJSON_IsString(p)) return prm_errf(err, PRM_EPARSE, "\"prompt\": expected a string");
  if (!cJSON_IsString(r)) return prm_errf(err, PRM_EPARSE, "\"response\": expected a string");
  *msgs = prm_xrealloc(*msgs, 2 * sizeof **msgs);
  (*msgs)[0] = (prm_chat_msg_t){"user", p->valuestring};
  (*msgs)[1] = (prm_chat_msg_t){"assistant", r->valuestring};
  *n = 2;
  return 0;
}

/* Tokenises every line of the file into d's arrays. */
static int prm__sft_read(prm_sft_t *d, const prm_sft_opts_t *o, const prm_tokenizer_t *tok,
                         prm_err_t *err) {
  prm_input_t *in = NULL;
  int rc = prm_input_open(o->path, &in, err);
  if (rc) return rc;
  int64_t n = 0, cap = 0, excap = 0;
  prm_chat_msg_t *msgs = NULL;
  const char *line;
  size_t len;
  while ((rc = prm_input_getline(in, &line, &len, err)) == 1) {
    if (len == strspn(line, " \t\r")) continue; /* blank lines between records */
    long long lineno = (long long)prm_input_lineno(in);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(line, len, &end, 0);
    if (root && end) {
      while (end < line + len && (*end == ' ' || *end == '\t' || *end == '\r')) end++;
      if (end < line + len) {
        cJSON_Delete(root);
        root = NULL;
      }
    }
    if (!root) {
      size_t col = end && end >= line ? (size_t)(end - line) + 1 : 1;
      rc = prm_errf(err, PRM_EPARSE, "%s:%lld: bad JSON near column %zu: expected one object per "
                    "line", o->path, lineno, col);
      break;
    }
    int nm = 0;
    int64_t n0 = n;
    rc = prm__sft_messages(root, &msgs, &nm, err);
    if (!rc) rc = prm_chat_encode(tok, o->chat, msgs, nm, &d->tok, &d->mask, &n, &cap, err);
    cJSON_Delete(root);
    if (rc) {
      prm_err_prefix(err, "%s:%lld", o->path, lineno);
      break;
    }
    for (int64_t i = n0; i < n; i++)
      if (d->tok[i] < 0 || d->tok[i] >= o->vocab_size) {
        rc = prm_errf(err, PRM_EINVAL, "%s:%lld: token %d is outside the vocabulary (%lld)",
                      o->path, lineno, (int)d->tok[i], (long long)o->vocab_size);
        break;
      }
    if (rc) break;
    /* Long examples are cut to S + 1 tokens; one without a loss token left
     * among its targets is dropped. */
    int64_t el = n - n0;
    if (el > o->seq_length + 1) {
      el = o->seq_length + 1;
      d->truncated++;
    }
    int loss = 0;
    for (int64_t i = n0 + 1; i < n0 + el; i++) loss |= d->mask[i];
    if (!loss) {
      d->dropped++;
      n = n0;
      continue;
    }
    n = n0 + el;
    if (d->nex == excap) {
      excap = excap ? 2 * excap : 256;
      d->off = prm_xrealloc(d->off, (size_t)excap * sizeof *d->off);
      d->len = prm_xrealloc(d->len, (size_t)excap * sizeof *d->len);
    }
    d->off[d->nex] = n0;
    d->len[d->nex++] = el;
  }
  free(msgs);
  prm_input_close(in);
  if (rc < 0) return rc;
  if (d->nex == 0)
    return prm_errf(err, PRM_EINVAL, "%s: no examples%s", o->path,
                    d->dropped ? " with a response token within seq_length" : " (empty file)");
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Order and packing                                                         */
/* ------------------------------------------------------------------------ */

static void prm__sft_pack(prm_sft_t *d, prm__sft_split_t *sp, int packing) {
  sp->first = prm_xmalloc((size_t)(sp->nex + 1) * sizeof *sp->first);
  sp->loss = prm_xcalloc((size_t)(sp->nex > 0 ? sp->nex : 1), sizeof *sp->loss);
  int64_t used = d->S; /* positions used in the open sequence: none open */
  for (int64_t i = 0; i < sp->nex; i++) {
    int64_t e = sp->order[i], need = d->len[e] - 1;
    if (!packing || used + need > d->S) {
      sp->first[sp->nseq++] = i;
      used = 0;
    }
    used += need;
    for (int64_t t = 1; t < d->len[e]; t++) sp->loss[sp->nseq - 1] += d->mask[d->off[e] + t];
  }
  sp->first[sp->nseq] = sp->nex;
  for (int64_t q = 0; q < sp->nseq; q++) sp->loss_total += sp->loss[q];
}

int prm_sft_open(const prm_sft_opts_t *o, prm_sft_t **out, prm_err_t *err) {
  *out = NULL;
  if (o->seq_length < 1) return prm_errf(err, PRM_EINVAL, "seq_length: must be at least 1");
  prm_tokenizer_t *tok = NULL;
  int rc = prm_tokenizer_open(o->tokenizer_type, o->tokenizer_model, &tok, err);
  if (rc) return rc;
  prm_sft_t *d = prm_xcalloc(1, sizeof *d);
  d->S = o->seq_length;
  d->shuffle = o->shuffle;
  d->seed = o->seed;
  d->pad = prm_tokenizer_eod(tok) >= 0 ? prm_tokenizer_eod(tok) : 0;
  rc = prm__sft_read(d, o, tok, err);
  prm_tokenizer_free(tok);
  int64_t bounds[4];
  if (!rc) rc = prm__data_split_bounds(o->split, d->nex, bounds, err);
  if (rc) {
    prm_sft_close(d);
    return rc;
  }
  for (int s = 0; s < PRM_SPLIT__COUNT; s++) {
    prm__sft_split_t *sp = &d->sp[s];
    sp->nex = bounds[s + 1] - bounds[s];
    sp->order = prm_xmalloc((size_t)(sp->nex > 0 ? sp->nex : 1) * sizeof *sp->order);
    for (int64_t i = 0; i < sp->nex; i++) sp->order[i] = bounds[s] + i;
    if (o->shuffle) { /* Fisher-Yates from a stream of (seed, split) */
      prm_rng_t r;
      prm_rng_seed(&r, o->seed * 1000003u + (uint64_t)s * 7919u + 17u);
      for (int64_t i = sp->nex - 1; i > 0; i--) {
        int64_t j = (int64_t)(prm_rng_u64(&r) % (uint64_t)(i + 1)), x = sp->order[i];
        sp->order[i] = sp->order[j];
        sp->order[j] = x;
      }
    }
    prm__sft_pack(d, sp, o->packing);
  }
  if (d->sp[o->need].nseq == 0) {
    rc = prm_errf(err, PRM_EINVAL, "%s: the %s split has no examples (%lld in all, split \"%s\")",
                  o->path, o->need == PRM_SPLIT_VALID ? "valid" : "train", (long long)d->nex,
                  o->split ? o->split : "1,0,0");
    prm_sft_close(d);
    return rc;
  }
  prm_sb_t sb = {0};
  prm_sb_appendf(&sb, "%s: %lld examples, chat template %s, %s to %lld positions: ", o->path,
                 (long long)d->nex, prm_chat_name(o->chat), o->packing ? "packed" : "padded",
                 (long long)d->S);
  static const char *const names[PRM_SPLIT__COUNT] = {"train", "valid", "test"};
  for (int s = 0; s < PRM_SPLIT__COUNT; s++)
    prm_sb_appendf(&sb, "%s%s %lld examples in %lld sequences (%lld loss tokens)", s ? ", " : "",
                   names[s], (long long)d->sp[s].nex, (long long)d->sp[s].nseq,
                   (long long)d->sp[s].loss_total);
  if (d->truncated)
    prm_sb_appendf(&sb, "; %lld cut to seq_length + 1 tokens", (long long)d->truncated);
  if (d->dropped)
    prm_sb_appendf(&sb, "; %lld dropped (no response token within seq_length)",
                   (long long)d->dropped);
  d->desc = prm_sb_steal(&sb);
  if (d->truncated)
    PRM_WARN("%s: %lld of %lld examples are longer than seq_length + 1 = %lld tokens and were "
             "cut", o->path, (long long)d->truncated, (long long)(d->nex + d->dropped),
             (long long)(d->S + 1));
  *out = d;
  return 0;
}

void prm_sft_close(prm_sft_t *d) {
  if (!d) return;
  for (int s = 0; s < PRM_SPLIT__COUNT; s++) {
    free(d->sp[s].order);
    free(d->sp[s].first);
    free(d->sp[s].loss);
  }
  free(d->tok);
  free(d->mask);
  free(d->off);
  free(d->len);
  free(d->desc);
  free(d);
}

int64_t prm_sft_examples(const prm_sft_t *d, prm_split_t s) { return d->sp[s].nex; }
int64_t prm_sft_sequences(const prm_sft_t *d, prm_split_t s) { return d->sp[s].nseq; }
const char *prm_sft_describe(const prm_sft_t *d) { return d->desc; }

static uint64_t prm__gcd(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* The sequence sample k reads: k mod n in the first epoch; later, with
 * shuffle, an affine permutation q -> (a q + b) mod n of the epoch's
 * positions, a coprime with n, both drawn from (seed, split, epoch).
 * Stateless, so any rank and any resume computes it alone. */
static int64_t prm__sft_seq(const prm_sft_t *d, prm_split_t s, int64_t k) {
  int64_t n = d->sp[s].nseq, e = k / n, q = k % n;
  if (!d->shuffle || e == 0 || n < 3) return q;
  prm_rng_t r;
  prm_rng_seed(&r, d->seed * 1000003u + (uint64_t)s * 7919u + (uint64_t)e * 104729u + 29u);
  uint64_t a = 1 + prm_rng_u64(&r) % (uint64_t)(n - 1), b = prm_rng_u64(&r) % (uint64_t)n;
  while (prm__gcd(a, (uint64_t)n) != 1) a = a % (uint64_t)(n - 1) + 1;
  return (int64_t)(((unsigned __int128)a * (uint64_t)q + b) % (uint64_t)n);
}

int64_t prm_sft_loss_tokens(const prm_sft_t *d, prm_split_t s, int64_t k) {
  const prm__sft_split_t *sp = &d->sp[s];
  return sp->nseq ? sp->loss[prm__sft_seq(d, s, k)] : 0;
}

void prm_sft_sample(const prm_sft_t *d, prm_split_t s, int64_t k, int32_t *tokens,
                    int32_t *targets, int32_t *seg, int32_t *pos) {
  const prm__sft_split_t *sp = &d->sp[s];
  PRM_ASSERT(sp->nseq > 0);
  int64_t q = prm__sft_seq(d, s, k), p = 0;
  int32_t id = 0;
  for (int64_t i = sp->first[q]; i < sp->first[q + 1]; i++, id++) {
    int64_t e = sp->order[i];
    const int32_t *t = d->tok + d->off[e];
    const uint8_t *m = d->mask + d->off[e];
    for (int64_t j = 0; j + 1 < d->len[e]; j++, p++) {
      tokens[p] = t[j];
      targets[p] = m[j + 1] ? t[j + 1] : -1;
      seg[p] = id;
      pos[p] = (int32_t)j;
    }
  }
  /* Padding: one more segment, never in the loss. */
  for (int64_t j = 0; p < d->S; j++, p++) {
    tokens[p] = d->pad;
    targets[p] = -1;
    seg[p] = id;
    pos[p] = (int32_t)j;
  }
}
