/* hf_tokenizer.c - loads a Hugging Face tokenizer.json with a BPE model, in
 * one of two families:
 *   byte-level (GPT-2, RoBERTa, GPT-NeoX, Llama 3, Qwen2, DeepSeek style):
 *     vocabulary keys are byte strings spelt with GPT-2's bytes-to-unicode
 *     table (a space is "Ġ"); pre-tokenizer ByteLevel, or a Split of a known
 *     pattern then ByteLevel without regex; normalizer NFC or none;
 *   SentencePiece-style (Llama 2, Mistral): keys are UTF-8 with "▁" for a
 *     space, character-level merges, byte_fallback (<0xXX>), unk_token;
 *     normalizer Prepend/Replace (and NFC) or a Metaspace pre-tokenizer;
 *     decoders Replace/ByteFallback/Fuse/Strip or Metaspace.
 * Merges are "a b" strings or [a, b] pairs, in priority order; added_tokens
 * are split off the text before pre-tokenising, as HF does. Every other
 * construct is refused with PRM_EINVAL naming it and the file. */
#define _GNU_SOURCE
#include "data/tok-impl.h"

#include "data/bpe-train.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* The inverse of GPT-2's bytes-to-unicode map (prm_bpe_byte_char, shared
 * with the trainer): code point (< 324) -> byte, or -1. */
static void unicode_to_bytes(int16_t inv[512]) {
  for (int i = 0; i < 512; i++) inv[i] = -1;
  for (int b = 0; b < 256; b++) inv[prm_bpe_byte_char((unsigned char)b)] = (int16_t)b;
}

/* Turns a byte-level token string into its bytes (out holds strlen(s)
 * bytes). Returns the length or -1 when a character is not in the table. */
static int64_t token_bytes(const int16_t inv[512], const char *s, char *out) {
  const unsigned char *p = (const unsigned char *)s;
  int64_t n = 0;
  while (*p) {
    uint32_t cp;
    if (p[0] < 0x80) {
      cp = *p++;
    } else if ((p[0] & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80) {
      cp = (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
      p += 2;
    } else {
      return -1; /* the table only has code points below U+0800 */
    }
    if (cp >= 512 || inv[cp] < 0) return -1;
    out[n++] = (char)inv[cp];
  }
  return n;
}

int prm__json_int(const cJSON *j, int64_t *v) {
  if (!cJSON_IsNumber(j)) return 0;
  double d = j->valuedouble;
  if (d < 0 || d > 2147483646.0 || d != (double)(int64_t)d) return 0;
  *v = (int64_t)d;
  return 1;
}

static int not_null(const cJSON *j) { return j && !cJSON_IsNull(j); }

int prm__json_read(const char *file, cJSON **root, prm_err_t *err) {
  char *text = NULL;
  size_t len = 0;
  *root = NULL;
  int rc = prm_fs_read_all(file, &text, &len, err);
  if (rc) return rc;
  *root = cJSON_ParseWithLength(text, len);
  if (!*root)
    rc = prm_errf(err, PRM_EPARSE, "%s: not valid JSON (near byte %td)", file,
                  cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - text : (ptrdiff_t)0);
  free(text);
  return rc;
}

const char *prm__json_type(const cJSON *j) {
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
  return cJSON_IsString(type) ? type->valuestring : "none";
}

/* ByteLevel: its own regex (GPT-2's) or none (after a Split). */
static int check_bytelevel(const cJSON *pre, const char *path, const char *where, int want_regex,
                           int *add_prefix_space, prm_err_t *err) {
  const cJSON *re = cJSON_GetObjectItemCaseSensitive(pre, "use_regex");
  int use_regex = !cJSON_IsFalse(re);
  if (use_regex != want_regex)
    return prm_errf(err, PRM_EINVAL, "%s: %s.use_regex: not implemented: %s here", path, where,
                    want_regex ? "only true is supported" : "only false is supported after a "
                                                        "Split");
  *add_prefix_space = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space"));
  return 0;
}

/* The pre-tokenizers read: ByteLevel (GPT-2's regex), or Sequence [Split
 * (a known pattern, Isolated, not inverted), ByteLevel without regex], the
 * Llama 3 / Qwen2 layout. Anything else is named and refused. */
static int check_pretok(const cJSON *pre, const char *path, int *add_prefix_space, int *pat,
                        int *ndig, prm_err_t *err) {
  *pat = PRM__PAT_GPT2;
  *ndig = 0;
  if (!strcmp(prm__json_type(pre), "ByteLevel"))
    return check_bytelevel(pre, path, "pre_tokenizer", 1, add_prefix_space, err);
  if (!strcmp(prm__json_type(pre), "Sequence")) {
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
    const cJSON *split = cJSON_GetArrayItem(seq, 0), *bl = cJSON_GetArrayItem(seq, 1);
    if (cJSON_GetArraySize(seq) == 2 && !strcmp(prm__json_type(split), "Split") &&
        !strcmp(prm__json_type(bl), "ByteLevel")) {
      const cJSON *rx = cJSON_GetObjectItemCaseSensitive(
          cJSON_GetObjectItemCaseSensitive(split, "pattern"), "Regex");
      const cJSON *beh = cJSON_GetObjectItemCaseSensitive(split, "behavior");
      if (!cJSON_IsString(rx) || prm__pretok_find(rx->valuestring, pat, ndig))
        return prm_errf(err, PRM_EINVAL, "%s: pre_tokenizer.pretokenizers[0].pattern: not "
                        "implemented: %s%s%s", path, cJSON_IsString(rx) ? "the regex " : "",
                        cJSON_IsString(rx) ? rx->valuestring : "a String pattern",
                        cJSON_IsString(rx) ? " is none of GPT-2's, cl100k's/Llama 3's, "
                                             "Qwen2's, o200k's" : "");
      if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") ||
          cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(split, "invert")))
        return prm_errf(err, PRM_EINVAL, "%s: pre_tokenizer.pretokenizers[0]: not implemented: "
                        "only behavior \"Isolated\" without invert", path);
      return check_bytelevel(bl, path, "pre_tokenizer.pretokenizers[1]", 0, add_prefix_space,
                             err);
    }
  }
  return prm_errf(err, PRM_EINVAL,
                  "%s: pre_tokenizer: not implemented: %s (supported: ByteLevel, or Sequence of "
                  "Split and ByteLevel)", path, prm__json_type(pre));
}

static const char META[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's space */

/* A SentencePiece-style normalizer: null, Prepend("\u2581") and Replace(" ",
 * "\u2581"), alone or in a Sequence. */
static int check_sp_normalizer(const cJSON *n, const char *path, prm__hf_info_t *info,
                               prm_err_t *err) {
  if (!not_null(n)) return 0;
  const cJSON *list = n, *one = NULL;
  int seq = !strcmp(prm__json_type(n), "Sequence");
  if (seq) list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
  int k = 0;
  for (one = seq ? (list ? list->child : NULL) : n; one; one = seq ? one->next : NULL, k++) {
    const char *ty = prm__json_type(one);
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(one, "prepend");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(one, "pattern"), "String");
    const cJSON *con = cJSON_GetObjectItemCaseSensitive(one, "content");
    if (!strcmp(ty, "NFC")) {
      info->nfc = 1;
    } else if (!strcmp(ty, "Prepend") && cJSON_IsString(pre) && !strcmp(pre->valuestring, META)) {
      info->prepend = 1;
    } else if (!strcmp(ty, "Replace") && cJSON_IsString(pat) && cJSON_IsString(con) &&
               !strcmp(pat->valuestring, " ") && !strcmp(con->valuestring, META)) {
      info->space_to_meta = 1;
    } else {
      return prm_errf(err, PRM_EINVAL, "%s: normalizer%s: not implemented: %s (supported: "
                      "NFC, Prepend(\"\u2581\"), Replace(\" \", \"\u2581\"), Sequence of those)",
                      path, seq ? "s[...]" : "", ty);
    }
    if (!seq) break;
  }
  return 0;
}

/* SentencePiece-style pre-tokenizer: none, or Metaspace("\u2581"). */
static int check_sp_pretok(const cJSON *pre, const char *path, prm__hf_info_t *info,
                           prm_err_t *err) {
  info->no_pretok = 1;
  if (!not_null(pre)) return 0;
  const cJSON *rep = cJSON_GetObjectItemCaseSensitive(pre, "replacement");
  const cJSON *scheme = cJSON_GetObjectItemCaseSensitive(pre, "prepend_scheme");
  const cJSON *aps = cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space");
  if (strcmp(prm__json_type(pre), "Metaspace") || !cJSON_IsString(rep) ||
      strcmp(rep->valuestring, META))
    return prm_errf(err, PRM_EINVAL, "%s: pre_tokenizer: not implemented: %s", path,
                    prm__json_type(pre));
  /* split (the default): a piece starts at every "\u2581" (MergedWithNext). */
  info->meta_split = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(pre, "split"));
  info->space_to_meta = 1;
  if (cJSON_IsString(scheme))
    info->prepend = !strcmp(scheme->valuestring, "always") ? 3
                    : !strcmp(scheme->valuestring, "first") ? 2 : 0;
  else
    info->prepend = cJSON_IsFalse(aps) ? 0 : 3;
  return 0;
}

/* SentencePiece-style decoder: Replace("\u2581", " "), ByteFallback, Fuse,
 * Strip(" ", n, 0) in a Sequence, or Metaspace. */
static int check_sp_decoder(const cJSON *d, const char *path, prm__hf_info_t *info,
                            prm_err_t *err) {
  info->dec_meta = 1;
  if (!not_null(d)) return 0;
  if (!strcmp(prm__json_type(d), "Metaspace")) {
    const cJSON *scheme = cJSON_GetObjectItemCaseSensitive(d, "prepend_scheme");
    info->dec_strip = !(cJSON_IsString(scheme) && !strcmp(scheme->valuestring, "never"));
    return 0;
  }
  const cJSON *list = strcmp(prm__json_type(d), "Sequence") ? NULL
                                                      : cJSON_GetObjectItemCaseSensitive(d, "decoders");
  if (!list)
    return prm_errf(err, PRM_EINVAL, "%s: decoder: not implemented: %s", path, prm__json_type(d));
  for (const cJSON *one = list->child; one; one = one->next) {
    const char *ty = prm__json_type(one);
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(one, "pattern"), "String");
    const cJSON *con = cJSON_GetObjectItemCaseSensitive(one, "content");
    const cJSON *start = cJSON_GetObjectItemCaseSensitive(one, "start");
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(one, "stop");
    if (!strcmp(ty, "ByteFallback") || !strcmp(ty, "Fuse")) continue;
    if (!strcmp(ty, "Replace") && cJSON_IsString(pat) && cJSON_IsString(con) &&
        !strcmp(pat->valuestring, META) && !strcmp(con->valuestring, " "))
      continue;
    if (!strcmp(ty, "Strip") && cJSON_IsString(con) && !strcmp(con->valuestring, " ") &&
        cJSON_IsNumber(start) && cJSON_IsNumber(stop) && stop->valuedouble == 0) {
      info->dec_strip = (int)start->valuedouble;
      continue;
    }
    return prm_errf(err, PRM_EINVAL, "%s: decoder.decoders[...]: not implemented: %s", path, ty);
  }
  return 0;
}

/* A ByteLevel layout: the pre-tokenizer is ByteLevel or has one. */
static int is_bytelevel(const cJSON *pre) {
  if (!strcmp(prm__json_type(pre), "ByteLevel")) return 1;
  const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
  for (const cJSON *p = seq ? seq->child : NULL; p; p = p->next)
    if (!strcmp(prm__json_type(p), "ByteLevel")) return 1;
  return 0;
}

/* The vocabulary, added tokens and merges of a BPE model (byte-level, or
 * character-level with charlevel) into b; *eod is the end-of-document id or
 * -1. flags_ok: added tokens may have single_word/lstrip/rstrip (the caller
 * handles them), else they are refused. On failure b is freed. */
int prm__hf_bpe_model(const cJSON *root, const char *file, int charlevel, int flags_ok,
                      prm__bpe_t *b, int32_t *eod, prm_err_t *err) {
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "type");
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  char *buf = NULL;
  int rc;
  int16_t inv[512];
  unicode_to_bytes(inv);
  *eod = -1;
  memset(b, 0, sizeof *b);
  if (mtype && (!cJSON_IsString(mtype) || strcmp(mtype->valuestring, "BPE"))) {
    rc = prm_errf(err, PRM_EINVAL, "%s: model.type: not implemented: only \"BPE\" is supported, "
                  "got %s", file, cJSON_IsString(mtype) ? mtype->valuestring : "a non-string");
    goto done;
  }
  if (!cJSON_IsObject(model) || !cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
    rc = prm_errf(err, PRM_EPARSE, "%s: model: expected an object with \"vocab\" (object) and "
                  "\"merges\" (array)", file);
    goto done;
  }
  /* The affixes: only the general path (flags_ok) of a character-level
   * BPE has them. */
  static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  const char *affix[2] = {NULL, NULL};
  for (size_t i = 0; i < 2; i++) {
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
    if (!not_null(u) || (cJSON_IsString(u) && !u->valuestring[0])) continue;
    if (!cJSON_IsString(u)) {
      rc = prm_errf(err, PRM_EPARSE, "%s: model.%s: expected a string", file, affixes[i]);
      goto done;
    }
    if (!flags_ok || !charlevel || strlen(u->valuestring) > PRM__BPE_AFFIX_MAX) {
      rc = prm_errf(err, PRM_EINVAL, "%s: model.%s: not implemented%s", file, affixes[i],
                    !flags_ok ? " here" : !charlevel ? " with a ByteLevel pre-tokenizer"
                                                     : " (longer than 16 bytes)");
      goto done;
    }
    affix[i] = u->valuestring;
  }
  const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
  if (not_null(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0)) {
    rc = prm_errf(err, PRM_EINVAL, "%s: model.dropout: not implemented", file);
    goto done;
  }
  /* The id space: the largest id of the vocabulary and the added tokens. */
  int64_t max_id = -1, id, nids = 0;
  int32_t n_ids;
  size_t longest = 1;
  for (const cJSON *v = vocab->child; v; v = v->next) {
    if (!prm__json_int(v, &id)) {
      rc = prm_errf(err, PRM_EPARSE, "%s: model.vocab[\"%s\"]: expected an id", file, v->string);
      goto done;
    }
    if (id > max_id) max_id = id;
    nids++;
    if (strlen(v->string) > longest) longest = strlen(v->string);
  }
  if (added && !cJSON_IsArray(added)) {
    rc = prm_errf(err, PRM_EPARSE, "%s: added_tokens: expected an array", file);
    goto done;
  }
  int ai = 0;
  for (const cJSON *a = added ? added->child : NULL; a; a = a->next, ai++) {
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
    if (!prm__json_int(cJSON_GetObjectItemCaseSensitive(a, "id"), &id) || !cJSON_IsString(content) ||
        !content->valuestring[0]) {
      rc = prm_errf(err, PRM_EPARSE, "%s: added_tokens[%d]: expected \"id\" and \"content\"",
                    file, ai);
      goto done;
    }
    if (id > max_id) max_id = id;
    nids++;
    static const char *const flags[] = {"single_word", "lstrip", "rstrip"};
    for (int k = 0; k < 3; k++)
      if (!flags_ok && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, flags[k]))) {
        rc = prm_errf(err, PRM_EINVAL, "%s: added_tokens[%d].%s: not implemented (only false)",
                      file, ai, flags[k]);
        goto done;
      }
  }
  if (max_id < 0) {
    rc = prm_errf(err, PRM_EPARSE, "%s: model.vocab is empty", file);
    goto done;
  }
  if ((rc = prm__bpe_id_space(max_id, nids, file, "token id", &n_ids, err))) goto done;
  prm__bpe_init(b, PRM__BPE_PAIRS, n_ids);
  b->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
  b->charlevel = charlevel;
  b->byte_fallback = charlevel && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model,
                                                                                 "byte_fallback"));
  b->fuse_unk = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "fuse_unk"));
  b->unk = -1;
  if (affix[0]) b->sub_prefix = prm_xstrdup(affix[0]);
  if (affix[1]) b->eow_suffix = prm_xstrdup(affix[1]);
  size_t plen = affix[0] ? strlen(affix[0]) : 0;

  /* Added tokens first: their ids decode to their content as written. */
  static const char *const eod_names[] = {"<|endoftext|>", "</s>", "<eos>"};
  int eod_pref = 99;
  ai = 0;
  for (const cJSON *a = added ? added->child : NULL; a; a = a->next, ai++) {
    const char *content = cJSON_GetObjectItemCaseSensitive(a, "content")->valuestring;
    prm__json_int(cJSON_GetObjectItemCaseSensitive(a, "id"), &id);
    if ((rc = prm__bpe_add(b, (int32_t)id, content, strlen(content), 1, err))) {
      prm_err_prefix(err, "%s: added_tokens[%d]", file, ai);
      goto done;
    }
    b->split_ids = prm_xrealloc(b->split_ids, (size_t)(b->n_split + 1) * sizeof *b->split_ids);
    b->split_ids[b->n_split++] = (int32_t)id;
    for (int k = 0; k < 3; k++)
      if (k < eod_pref && !strcmp(content, eod_names[k])) {
        eod_pref = k;
        *eod = (int32_t)id;
      }
  }
  buf = prm_xmalloc(2 * longest + 2);
  for (const cJSON *v = vocab->child; v; v = v->next) {
    prm__json_int(v, &id);
    int64_t n = charlevel ? (int64_t)strlen(v->string) : token_bytes(inv, v->string, buf);
    if (charlevel) memcpy(buf, v->string, (size_t)n);
    if (b->len[id] && b->special[id]) { /* an added token kept in the vocab */
      if (n > 0 && b->len[id] == n && !memcmp(b->arena + b->off[id], buf, (size_t)n))
        prm__bpe_index(b, (int32_t)id);
      continue;
    }
    if (n <= 0) {
      rc = prm_errf(err, PRM_EINVAL, "%s: model.vocab[\"%s\"]: not a byte-level token (a "
                    "character outside GPT-2's bytes-to-unicode table)", file, v->string);
      goto done;
    }
    if ((rc = prm__bpe_add(b, (int32_t)id, buf, (size_t)n, 0, err))) {
      prm_err_prefix(err, "%s: model.vocab[\"%s\"]", file, v->string);
      goto done;
    }
  }
  if ((rc = prm__bpe_finish(b, file, err))) goto done;
  const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
  if (cJSON_IsString(unk)) {
    size_t ul = strlen(unk->valuestring);
    for (int32_t i = 0; i < b->n_ids && b->unk < 0; i++)
      if (b->len[i] == ul && !memcmp(b->arena + b->off[i], unk->valuestring, ul)) b->unk = i;
    if (b->unk < 0) {
      rc = prm_errf(err, PRM_EINVAL, "%s: model.unk_token \"%s\" is not in the vocabulary", file,
                    unk->valuestring);
      goto done;
    }
  }
  if (charlevel && !b->byte_fallback && b->unk < 0) {
    rc = prm_errf(err, PRM_EINVAL, "%s: model: a character-level BPE needs byte_fallback or an "
                  "unk_token", file);
    goto done;
  }

  /* Merges: rank = position in the list. */
  int r = 0;
  for (const cJSON *m = merges->child; m; m = m->next, r++) {
    const char *left = NULL, *right = NULL;
    char *pair = NULL;
    if (cJSON_IsString(m)) {
      pair = prm_xstrdup(m->valuestring);
      char *sp = strchr(pair, ' ');
      if (sp && !strchr(sp + 1, ' ')) {
        *sp = 0;
        left = pair;
        right = sp + 1;
      }
    } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
               cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
               cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
      left = cJSON_GetArrayItem(m, 0)->valuestring;
      right = cJSON_GetArrayItem(m, 1)->valuestring;
    }
    int32_t ids[3] = {-1, -1, -1};
    if (left && right) {
      /* With a continuing_subword_prefix the merge of a and b is a + b
       * less the prefix's length (b is never a piece's first part). */
      size_t ln = strlen(left), rn = strlen(right), cut = rn >= plen ? plen : 0;
      char *cat = prm_xmalloc(ln + rn + 1), *bytes = prm_xmalloc(ln + rn + 1);
      memcpy(cat, left, ln);
      memcpy(cat + ln, right + cut, rn - cut + 1);
      const char *parts[3] = {left, right, cat};
      for (int k = 0; k < 3; k++) {
        int64_t n = charlevel ? (int64_t)strlen(parts[k]) : token_bytes(inv, parts[k], bytes);
        if (charlevel) memcpy(bytes, parts[k], (size_t)n);
        ids[k] = n > 0 ? prm__bpe_find(b, bytes, (size_t)n) : -1;
      }
      free(cat);
      free(bytes);
    }
    if (!left || !right)
      rc = prm_errf(err, PRM_EPARSE, "%s: model.merges[%d]: expected \"a b\" or [\"a\", \"b\"]",
                    file, r);
    else if (ids[0] < 0 || ids[1] < 0 || ids[2] < 0)
      rc = prm_errf(err, PRM_EINVAL, "%s: model.merges[%d]: \"%s\", \"%s\" or their merge is not "
                    "in the vocabulary", file, r, left, right);
    free(pair);
    if (rc) goto done;
    prm__bpe_add_pair(b, ids[0], ids[1], ids[2], r);
  }
  rc = 0;
done:
  if (rc) prm__bpe_free(b);
  free(buf);
  return rc;
}

int prm__hf_load(prm__bpe_t *b, const char *path, prm__hf_info_t *info, prm_err_t *err) {
  char *file = prm_fs_is_dir(path) ? prm_path_join(path, "tokenizer.json") : prm_xstrdup(path);
  cJSON *root = NULL;
  int rc;
  memset(info, 0, sizeof *info);
  info->eod = -1;
  memset(b, 0, sizeof *b);

  if ((rc = prm__json_read(file, &root, err))) goto done;
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
  const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  /* Added tokens matched after normalisation: only the general path
   * (hf_pipe.c) does that, and it matters once a normalizer other than NFC
   * can change the text around them. */
  if (not_null(norm) && strcmp(prm__json_type(norm), "NFC") && cJSON_IsArray(added)) {
    int ai = 0;
    for (const cJSON *a = added->child; a; a = a->next, ai++)
      if (!cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(a, "normalized"))) {
        rc = prm_errf(err, PRM_EINVAL, "%s: added_tokens[%d].normalized: not implemented here",
                      file, ai);
        goto done;
      }
  }
  prm__hf_template(root, file, &info->tpl);
  int charlevel = !is_bytelevel(pre);
  if (!charlevel) {
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"))) {
      rc = prm_errf(err, PRM_EINVAL, "%s: model.byte_fallback: not implemented with a "
                    "ByteLevel pre-tokenizer", file);
      goto done;
    }
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(norm, "normalizers");
    if (!strcmp(prm__json_type(norm), "NFC") ||
        (!strcmp(prm__json_type(norm), "Sequence") && cJSON_GetArraySize(nl) == 1 &&
         !strcmp(prm__json_type(cJSON_GetArrayItem(nl, 0)), "NFC"))) {
      info->nfc = 1;
    } else if (not_null(norm)) {
      rc = prm_errf(err, PRM_EINVAL, "%s: normalizer: not implemented: %s (only NFC or null with "
                    "a ByteLevel pre-tokenizer)", file, prm__json_type(norm));
      goto done;
    }
    if ((rc = check_pretok(pre, file, &info->add_prefix_space, &info->pat, &info->ndig, err)))
      goto done;
  } else if ((rc = check_sp_normalizer(cJSON_GetObjectItemCaseSensitive(root, "normalizer"),
                                       file, info, err)) ||
             (rc = check_sp_pretok(pre, file, info, err)) ||
             (rc = check_sp_decoder(cJSON_GetObjectItemCaseSensitive(root, "decoder"), file,
                                    info, err))) {
    goto done;
  }

  if ((rc = prm__hf_bpe_model(root, file, charlevel, 0, b, &info->eod, err))) goto done;
  if (charlevel && info->no_pretok) {
    info->word_split = 1;
    for (int32_t i = 0; i < b->n_ids && info->word_split; i++) {
      const char *tk = b->arena + b->off[i];
      for (uint32_t k = 1; !b->special[i] && k + 3 <= b->len[i]; k++)
        if (!memcmp(tk + k, META, 3) && !(k >= 3 && !memcmp(tk + k - 3, META, 3))) {
          info->word_split = 0;
          break;
        }
    }
  }
  rc = 0;
done:
  if (rc) prm__bpe_free(b);
  cJSON_Delete(root);
  free(file);
  return rc;
}
