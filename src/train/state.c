/* state.c - the training state saved beside a checkpoint's weights, and
 * resuming from it: optim-rank-00000.bin holds the AdamW moments behind a
 * header (magic, version, step, tensor sizes) and a CRC-32 of the payload;
 * state-rank-00000.json holds the iteration and the data position; DONE is
 * written last, so a folder without it is an interrupted save. */
#define _GNU_SOURCE
#include "train-impl.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define PRM__OPT_MAGIC "PRMOPTIM"
#define PRM__OPT_VERSION 1u

/* Header, little-endian: magic[8], u32 version, u32 tensors, u64 step,
 * u64 floats per moment, u32 crc32 of everything after the header, u32 0,
 * then u64 numel[tensors], then m, then v (f32). */
typedef struct {
  char magic[8];
  uint32_t version, tensors;
  uint64_t step, numel;
  uint32_t crc, zero;
} prm__opt_hdr_t;
_Static_assert(sizeof(prm__opt_hdr_t) == 40, "optimizer header layout");
/* The header and moments are written as the CPU holds them. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the optimizer file is little-endian");

static uint32_t prm__crc(uint32_t crc, const void *p, size_t n) {
  const unsigned char *b = p;
  while (n) { /* zlib's crc32 takes a uInt length */
    uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
    crc = (uint32_t)crc32(crc, b, k);
    b += k;
    n -= k;
  }
  return crc;
}

int prm__state_write(const char *dir, const prm_llama_t *m, const prm_ckpt_state_t *st,
                     prm_err_t *err) {
  size_t bytes = (size_t)m->nparams * sizeof(float);
  uint64_t *sizes = prm_xmalloc((size_t)m->ntensors * sizeof *sizes);
  for (int i = 0; i < m->ntensors; i++) sizes[i] = (uint64_t)m->tensors[i].numel;
  prm__opt_hdr_t h = {.version = PRM__OPT_VERSION, .tensors = (uint32_t)m->ntensors,
                      .step = (uint64_t)st->iteration, .numel = (uint64_t)m->nparams};
  memcpy(h.magic, PRM__OPT_MAGIC, 8);
  h.crc = prm__crc(0, sizes, (size_t)m->ntensors * sizeof *sizes);
  h.crc = prm__crc(h.crc, st->adam_m, bytes);
  h.crc = prm__crc(h.crc, st->adam_v, bytes);
  char *path = prm_path_join(dir, "optim-rank-00000.bin");
  prm_afile_t f;
  int rc = prm_afile_open(&f, path, err);
  if (!rc) {
    if ((rc = prm_afile_write(&f, &h, sizeof h, err)) ||
        (rc = prm_afile_write(&f, sizes, (size_t)m->ntensors * sizeof *sizes, err)) ||
        (rc = prm_afile_write(&f, st->adam_m, bytes, err)) ||
        (rc = prm_afile_write(&f, st->adam_v, bytes, err)))
      prm_afile_abort(&f);
    else
      rc = prm_afile_commit(&f, err);
  }
  free(path);
  free(sizes);
  if (rc) return rc;
  prm__fault_act(PRM__FAULT_CKPT_CRASH, st->iteration); /* fault injection: a torn save */

  char *json = prm_xasprintf("{\n  \"iteration\": %lld,\n  \"consumed_samples\": %lld,\n"
                             "  \"data_position\": %lld,\n  \"seed\": %lld,\n"
                             "  \"lr_scheduler\": {\"step\": %lld},\n  \"rank\": 0,\n"
                             "  \"world_size\": 1\n}\n",
                             (long long)st->iteration, (long long)st->consumed_samples,
                             (long long)st->consumed_samples, (long long)st->seed,
                             (long long)st->iteration);
  path = prm_path_join(dir, "state-rank-00000.json");
  rc = prm_fs_write_atomic(path, json, strlen(json), err);
  free(path);
  free(json);
  if (rc) return rc;
  path = prm_path_join(dir, "DONE");
  rc = prm_fs_write_atomic(path, "ok\n", 3, err);
  free(path);
  return rc;
}

int prm_ckpt_load_state(const char *dir, const prm_llama_t *m, float *adam_m, float *adam_v,
                        prm_ckpt_state_t *st, prm_err_t *err) {
  char *path = prm_path_join(dir, "optim-rank-00000.bin"), *data = NULL, *json = NULL;
  size_t len = 0, bytes = (size_t)m->nparams * sizeof(float);
  cJSON *root = NULL;
  int rc = prm_fs_read_all(path, &data, &len, err);
  if (rc) goto done;
  prm__opt_hdr_t h;
  size_t head = sizeof h + (size_t)m->ntensors * sizeof(uint64_t);
  if (len < sizeof h) {
    rc = prm_errf(err, PRM_EPARSE, "%s: truncated (%zu bytes)", path, len);
    goto done;
  }
  memcpy(&h, data, sizeof h);
  if (memcmp(h.magic, PRM__OPT_MAGIC, 8) || h.version != PRM__OPT_VERSION) {
    rc = prm_errf(err, PRM_EPARSE, "%s: not a primus optimizer file (version %u)", path, h.version);
    goto done;
  }
  if (h.tensors != (uint32_t)m->ntensors || h.numel != (uint64_t)m->nparams ||
      len != head + 2 * bytes) {
    rc = prm_errf(err, PRM_EPARSE,
                  "%s: %u tensors of %llu floats in %zu bytes, the model has %d tensors of %lld",
                  path, h.tensors, (unsigned long long)h.numel, len, m->ntensors,
                  (long long)m->nparams);
    goto done;
  }
  const uint64_t *sizes = (const uint64_t *)(data + sizeof h);
  for (int i = 0; i < m->ntensors; i++)
    if (sizes[i] != (uint64_t)m->tensors[i].numel) {
      rc = prm_errf(err, PRM_EPARSE, "%s: tensor %d (%s) has %llu moments, the model %lld", path,
                    i, m->tensors[i].name, (unsigned long long)sizes[i],
                    (long long)m->tensors[i].numel);
      goto done;
    }
  if (prm__crc(0, data + sizeof h, len - sizeof h) != h.crc) {
    rc = prm_errf(err, PRM_EPARSE, "%s: checksum mismatch (a damaged file)", path);
    goto done;
  }
  memcpy(adam_m, data + head, bytes);
  memcpy(adam_v, data + head + bytes, bytes);

  free(path);
  path = prm_path_join(dir, "state-rank-00000.json");
  if ((rc = prm_fs_read_all(path, &json, NULL, err))) goto done;
  root = cJSON_Parse(json);
  cJSON *it = cJSON_GetObjectItem(root, "iteration"), *cs = cJSON_GetObjectItem(root, "consumed_samples");
  cJSON *seed = cJSON_GetObjectItem(root, "seed");
  if (!cJSON_IsNumber(it) || !cJSON_IsNumber(cs) || !cJSON_IsNumber(seed) ||
      (uint64_t)it->valuedouble != h.step) {
    rc = prm_errf(err, PRM_EPARSE, "%s: expected iteration %llu, consumed_samples and seed", path,
                  (unsigned long long)h.step);
    goto done;
  }
  st->iteration = (int64_t)it->valuedouble;
  st->consumed_samples = (int64_t)cs->valuedouble;
  st->seed = (int64_t)seed->valuedouble;
done:
  cJSON_Delete(root);
  free(json);
  free(data);
  free(path);
  return rc;
}

static int prm__by_name_desc(const void *a, const void *b) {
  return -strcmp(*(char *const *)a, *(char *const *)b);
}

int prm_ckpt_resume(prm_llama_t *m, const char *save, float *adam_m, float *adam_v,
                    prm_ckpt_state_t *st, prm_err_t *err) {
  st->iteration = st->consumed_samples = 0;
  prm_argv_t names = {0};
  if (!prm_fs_is_dir(save)) return 0; /* nothing saved yet: a fresh start */
  int rc = prm_fs_list_dir(save, &names, err);
  if (rc) return rc;
  qsort(names.v, (size_t)names.n, sizeof *names.v, prm__by_name_desc); /* newest first */
  for (int i = 0; i < names.n; i++) {
    if (!prm_startswith(names.v[i], "iter_") || strchr(names.v[i], '.')) continue;
    char *dir = prm_path_join(save, names.v[i]), *done = prm_path_join(dir, "DONE");
    prm_err_t e = {0};
    if (!prm_fs_exists(done)) {
      PRM_WARN("%s: no DONE marker (an interrupted save); skipped", dir);
    } else if (prm_ckpt_load_hf(m, dir, &e) || prm_ckpt_load_state(dir, m, adam_m, adam_v, st, &e)) {
      PRM_WARN("%s: skipped: %s", dir, e.msg);
    } else {
      PRM_INFO("resuming from %s (iteration %lld, %lld samples consumed)", dir,
               (long long)st->iteration, (long long)st->consumed_samples);
      free(done);
      free(dir);
      prm_argv_free(&names);
      return 0;
    }
    free(done);
    free(dir);
  }
  prm_argv_free(&names);
  st->iteration = st->consumed_samples = 0;
  return 0;
}

int prm_ckpt_prune(const char *save, int64_t keep, prm_err_t *err) {
  if (keep <= 0) return 0;
  prm_argv_t names = {0};
  int rc = prm_fs_list_dir(save, &names, err);
  if (rc) return rc;
  qsort(names.v, (size_t)names.n, sizeof *names.v, prm__by_name_desc); /* newest first */
  int64_t complete = 0;
  for (int i = 0; i < names.n; i++) {
    if (!prm_startswith(names.v[i], "iter_") || strchr(names.v[i], '.')) continue;
    char *dir = prm_path_join(save, names.v[i]), *done = prm_path_join(dir, "DONE");
    if (prm_fs_exists(done) && ++complete > keep) {
      /* DONE goes first: a removal cut short leaves a folder that resume
       * skips, never one that looks complete. */
      unlink(done);
      prm_fs_rm_rf(dir);
      PRM_INFO("ckpt_keep %lld: removed %s", (long long)keep, dir);
    }
    free(done);
    free(dir);
  }
  prm_argv_free(&names);
  return prm_fs_fsync_dir(save, err);
}
