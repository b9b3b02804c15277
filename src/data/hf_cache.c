/* hf_cache.c - tokenizers named by Hugging Face model id
 * ("meta-llama/Meta-Llama-3-8B", as Primus' model presets name them),
 * found in the local Hugging Face hub cache. primus never downloads: a
 * model that is not cached is reported as such, and mock-data runs go on
 * with the preset's vocabulary size. */
#define _GNU_SOURCE
#include "primus/prm_data.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int prm_hf_is_model_id(const char *s) {
  if (!s || !*s || s[0] == '/' || s[0] == '.' || prm_fs_exists(s)) return 0;
  const char *slash = strchr(s, '/');
  if (!slash || slash == s || !slash[1] || strchr(slash + 1, '/') || strstr(s, "..")) return 0;
  for (const char *c = s; *c; c++)
    if (!(*c == '/' || *c == '.' || *c == '_' || *c == '-' || (*c >= '0' && *c <= '9') ||
          (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')))
      return 0;
  return 1;
}

const char *prm_hf_cache_dir(char *buf, size_t n) {
  const char *hub = getenv("HF_HUB_CACHE"), *home = getenv("HF_HOME");
  const char *xdg = getenv("XDG_CACHE_HOME"), *user = getenv("HOME");
  if (hub && *hub) snprintf(buf, n, "%s", hub);
  else if (home && *home) snprintf(buf, n, "%s/hub", home);
  else if (xdg && *xdg) snprintf(buf, n, "%s/huggingface/hub", xdg);
  else snprintf(buf, n, "%s/.cache/huggingface/hub", user && *user ? user : ".");
  return buf;
}

/* A snapshot is usable when it holds a tokenizer's files. */
static int prm__has_tokenizer(const char *dir) {
  static const char *const files[] = {"tokenizer.json", "vocab.json", "tokenizer.model"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char *p = prm_path_join(dir, files[i]);
    int ok = prm_fs_exists(p);
    free(p);
    if (ok) return 1;
  }
  return 0;
}

int prm_hf_cache_resolve(const char *id, char *out, size_t n) {
  if (!prm_hf_is_model_id(id)) return PRM_ENOENT;
  char cache[2048];
  prm_hf_cache_dir(cache, sizeof cache);
  /* models--org--name: the id with '/' spelled "--". */
  prm_sb_t repo = {0};
  prm_sb_appendf(&repo, "%s/models--", cache);
  for (const char *c = id; *c; c++)
    if (*c == '/') prm_sb_append(&repo, "--");
    else prm_sb_putc(&repo, *c);
  char *snaps = prm_path_join(prm_sb_str(&repo), "snapshots");
  char *found = NULL;
  /* refs/main names the revision the cache last fetched for main. */
  char *ref = prm_path_join(prm_sb_str(&repo), "refs/main"), *rev = NULL;
  if (prm_fs_read_all(ref, &rev, NULL, NULL) == 0) {
    char *r = prm_strtrim(rev);
    char *dir = *r && !strchr(r, '/') ? prm_path_join(snaps, r) : NULL;
    if (dir && prm__has_tokenizer(dir)) found = dir;
    else free(dir);
  }
  if (!found) {
    prm_argv_t revs = {0};
    time_t newest = 0;
    if (prm_fs_list_dir(snaps, &revs, NULL) == 0)
      for (int i = 0; i < revs.n; i++) {
        char *dir = prm_path_join(snaps, revs.v[i]);
        struct stat st;
        if (prm__has_tokenizer(dir) && stat(dir, &st) == 0 && (!found || st.st_mtime > newest)) {
          free(found);
          found = dir;
          newest = st.st_mtime;
        } else {
          free(dir);
        }
      }
    prm_argv_free(&revs);
  }
  int rc = PRM_ENOENT;
  if (found && strlen(found) < n) {
    snprintf(out, n, "%s", found);
    rc = 0;
  }
  free(found);
  free(rev);
  free(ref);
  free(snaps);
  prm_sb_free(&repo);
  return rc;
}
