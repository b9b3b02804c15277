/* chat.c - chat templates for supervised fine-tuning: an example's messages
 * become tokens plus a loss mask (1 on the assistant's content and the
 * end-of-turn after it). Markers such as "<|user|>" are single tokens when
 * the tokenizer has them (a Llama-3 tokenizer.json's added tokens), plain
 * text otherwise (ByteTokenizer, GPT-2). Each piece - marker, role, content
 * - is encoded on its own, so no token straddles the boundary between what
 * the model reads and what it learns to write. */
#define _GNU_SOURCE
#include "primus/prm_data.h"

#include <stdlib.h>
#include <string.h>

static const char *const prm__chat_names[PRM_CHAT__COUNT] = {"default", "llama3"};
_Static_assert(PRM_CHAT__COUNT == 2, "chat template names");

int prm_chat_parse(const char *name, prm_chat_t *out, prm_err_t *err) {
  *out = PRM_CHAT_DEFAULT;
  if (!name || !*name) return 0;
  for (int i = 0; i < PRM_CHAT__COUNT; i++)
    if (!strcmp(name, prm__chat_names[i])) {
      *out = (prm_chat_t)i;
      return 0;
    }
  return prm_errf(err, PRM_EINVAL, "chat_template: expected default or llama3, got \"%s\"", name);
}

const char *prm_chat_name(prm_chat_t c) {
  return c >= 0 && c < PRM_CHAT__COUNT ? prm__chat_names[c] : "?";
}

/* Appends one piece with mask value m; grows the arrays to hold it. */
static int prm__piece(const prm_tokenizer_t *t, const char *text, int marker, uint8_t m,
                      int32_t **ids, uint8_t **mask, int64_t *n, int64_t *cap, prm_err_t *err) {
  int64_t n0 = *n;
  int32_t id = marker ? prm_tokenizer_token_to_id(t, text) : -1;
  if (id >= 0) {
    if (*n + 1 > *cap) {
      *cap = *cap ? 2 * *cap : 256;
      *ids = prm_xrealloc(*ids, (size_t)*cap * sizeof **ids);
    }
    (*ids)[(*n)++] = id;
  } else if (*text) {
    int rc = prm_tokenizer_encode_append(t, text, strlen(text), ids, n, cap, err);
    if (rc) return rc;
  }
  /* The mask follows the ids' capacity. */
  *mask = prm_xrealloc(*mask, (size_t)(*cap > 0 ? *cap : 1));
  memset(*mask + n0, m, (size_t)(*n - n0));
  return 0;
}

int prm_chat_encode(const prm_tokenizer_t *t, prm_chat_t c, const prm_chat_msg_t *msgs,
                    int nmsgs, int32_t **ids, uint8_t **mask, int64_t *n, int64_t *cap,
                    prm_err_t *err) {
  int rc = 0;
#define PIECE(text, marker, m)                                                   \
  if ((rc = prm__piece(t, text, marker, m, ids, mask, n, cap, err))) return rc
  if (c == PRM_CHAT_LLAMA3) PIECE("<|begin_of_text|>", 1, 0);
  for (int i = 0; i < nmsgs; i++) {
    const char *role = msgs[i].role;
    int asst = !strcmp(role, "assistant");
    if (!asst && strcmp(role, "user") && strcmp(role, "system"))
      return prm_errf(err, PRM_EINVAL, "unknown role \"%s\" (expected system, user or assistant)",
                      role);
    if (c == PRM_CHAT_LLAMA3) {
      PIECE("<|start_header_id|>", 1, 0);
      PIECE(role, 0, 0);
      PIECE("<|end_header_id|>", 1, 0);
      PIECE("\n\n", 0, 0);
      PIECE(msgs[i].content, 0, (uint8_t)asst);
      PIECE("<|eot_id|>", 1, (uint8_t)asst);
      continue;
    }
    char header[32];
    snprintf(header, sizeof header, "<|%s|>", role);
    PIECE(header, 1, 0);
    PIECE("\n", 0, 0);
    PIECE(msgs[i].content, 0, (uint8_t)asst);
    if (!asst) {
      PIECE("\n", 0, 0);
      continue;
    }
    int32_t eod = prm_tokenizer_eod(t);
    if (eod < 0) {
      PIECE("<|end|>", 1, 1);
    } else {
      if (*n + 1 > *cap) {
        *cap = *cap ? 2 * *cap : 256;
        *ids = prm_xrealloc(*ids, (size_t)*cap * sizeof **ids);
        *mask = prm_xrealloc(*mask, (size_t)*cap);
      }
      (*mask)[*n] = 1;
      (*ids)[(*n)++] = eod;
    }
  }
#undef PIECE
  return 0;
}

/* A Jinja string literal of s (single quotes, \n and quotes escaped). */
static void prm__jstr(prm_sb_t *sb, const char *s) {
  prm_sb_putc(sb, '\'');
  for (; *s; s++) {
    if (*s == '\n') prm_sb_append(sb, "\\n");
    else if (*s == '\'' || *s == '\\') prm_sb_putc(sb, '\\'), prm_sb_putc(sb, *s);
    else prm_sb_putc(sb, *s);
  }
  prm_sb_putc(sb, '\'');
}

char *prm_chat_jinja(prm_chat_t c, const char *eos) {
  prm_sb_t sb = {0};
  if (c == PRM_CHAT_LLAMA3) {
    prm_sb_append(&sb, "{{ '<|begin_of_text|>' }}{% for message in messages %}"
                       "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
                       "message['content'] + '<|eot_id|>' }}{% endfor %}"
                       "{% if add_generation_prompt %}"
                       "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}");
    return prm_sb_steal(&sb);
  }
  prm_sb_append(&sb, "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + "
                     "message['content'] }}{% if message['role'] == 'assistant' %}{{ ");
  prm__jstr(&sb, eos ? eos : "<|end|>");
  prm_sb_append(&sb, " }}{% else %}{{ '\\n' }}{% endif %}{% endfor %}"
                     "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}");
  return prm_sb_steal(&sb);
}
