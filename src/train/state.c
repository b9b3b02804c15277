/* state.c - the training state saved beside a checkpoint's weights, and
 * resuming from it. Each rank writes optim-rank-RRRRR.bin, the AdamW
 * moments of its shard [lo, hi) of the flat parameter vector behind a
 * header (magic, version, step, world size, the shard, tensor sizes) and a
 * CRC-32 of the payload, and state-rank-RRRRR.json (the iteration and the
 * data position); DONE is written last, so a folder without it is an
 * interrupted save. A full optimizer is rank 0 of a world of 1 with
 * [0, nparams). Reading takes any world size (resharding). */
#define _GNU_SOURCE
#include "train-impl.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define PRM__OPT_MAGIC "PRMOPTIM"
#define PRM__OPT_VERSION 2u

/* Header, little-endian: magic[8], u32 version, u32 tensors, u64 step,
 * u64 floats per moment in this file, u32 crc32 of everything after the
 * header, u32 0. Version 2 goes on with the shard record (below), then
 * both versions with u64 numel[tensors], then m, then v (f32). Version 1
 * (one rank, full moments) has no shard record. */
typedef struct {
  char magic[8];
  uint32_t version, tensors;
  uint64_t step, numel;
  uint32_t crc, zero;
} prm__opt_hdr_t;
_Static_assert(sizeof(prm__opt_hdr_t) == 40, "optimizer header layout");
/* Version 2: which rank of how many wrote the file, and its part [lo, hi)
 * of the flat vector of `total` parameters. */
typedef struct {
  uint32_t rank, world;
  uint64_t lo, hi, total;
} prm__opt_shard_t;
_Static_assert(sizeof(prm__opt_shard_t) == 32, "optimizer shard record layout");
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

static char *prm__rank_file(const char *dir, const char *what, int rank, const char *ext) {
  char name[64];
  snprintf(name, sizeof name, "%s-rank-%05d.%s", what, rank, ext);
  return prm_path_join(dir, name);
}

int prm__state_write(const char *dir, const prm_llama_t *m, const prm_ckpt_state_t *st,
                     prm_err_t *err) {
  int world = st->world > 0 ? st->world : 1;
  int64_t lo = st->hi > 0 ? st->lo : 0, hi = st->hi > 0 ? st->hi : m->nparams;
  PRM_ASSERT(st->rank >= 0 && st->rank < world && 0 <= lo && lo <= hi && hi <= m->nparams);
  size_t bytes = (size_t)(hi - lo) * sizeof(float);
  uint64_t *sizes = prm_xmalloc((size_t)m->ntensors * sizeof *sizes);
  for (int i = 0; i < m->ntensors; i++) sizes[i] = (uint64_t)m->tensors[i].numel;
  prm__opt_hdr_t h = {.version = PRM__OPT_VERSION, .tensors = (uint32_t)m->ntensors,
                      .step = (uint64_t)st->iteration, .numel = (uint64_t)(hi - lo)};
  prm__opt_shard_t sh = {.rank = (uint32_t)st->rank, .world = (uint32_t)world,
                         .lo = (uint64_t)lo, .hi = (uint64_t)hi, .total = (uint64_t)m->nparams};
  memcpy(h.magic, PRM__OPT_MAGIC, 8);
  h.crc = prm__crc(0, &sh, sizeof sh);
  h.crc = prm__crc(h.crc, sizes, (size_t)m->ntensors * sizeof *sizes);
  h.crc = prm__crc(h.crc, st->adam_m, bytes);
  h.crc = prm__crc(h.crc, st->adam_v, bytes);
  char *path = prm__rank_file(dir, "optim", st->rank, "bin");
  prm_afile_t f;
  int rc = st->no_optim ? 0 : prm_afile_open(&f, path, err); /* no_save_optim: no moments */
  if (!rc && !st->no_optim) {
    if ((rc = prm_afile_write(&f, &h, sizeof h, err)) ||
        (rc = prm_afile_write(&f, &sh, sizeof sh, err)) ||
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

  /* Whose checkpoint this is (run ids hold [A-Za-z0-9._-] only). */
  char owner[3 * PRM_RUN_ID_MAX] = "";
  if (st->run_id[0])
    snprintf(owner, sizeof owner, ",\n  \"run_id\": \"%s\",\n  \"lineage\": \"%s\"", st->run_id,
             st->lineage[0] ? st->lineage : st->run_id);
  /* no_save_rng: no seed (the random state); no_save_optim: no shard. */
  char rng[64] = "  \"rng\": false", shard[96] = "  \"optimizer\": false";
  if (!st->no_rng) snprintf(rng, sizeof rng, "  \"seed\": %lld", (long long)st->seed);
  if (!st->no_optim)
    snprintf(shard, sizeof shard, "  \"optimizer_shard\": [%lld, %lld]", (long long)lo,
             (long long)hi);
  char *json = prm_xasprintf("{\n  \"iteration\": %lld,\n  \"consumed_samples\": %lld,\n"
                             "  \"data_position\": %lld,\n%s,\n"
                             "  \"lr_scheduler\": {\"step\": %lld},\n  \"rank\": %d,\n"
                             "  \"world_size\": %d,\n%s%s\n}\n",
                             (long long)st->iteration, (long long)st->consumed_samples,
                             (long long)st->consumed_samples, rng,
                             (long long)st->iteration, st->rank, world, shard, owner);
  path = prm__rank_file(dir, "state", st->rank, "json");
  rc = prm_fs_write_atomic(path, json, strlen(json), err);
  free(path);
  free(json);
  return rc;
}

int prm__state_done(const char *dir, prm_err_t *err) {
  char *path = prm_path_join(dir, "DONE");
  int rc = prm_fs_write_atomic(path, "ok\n", 3, err);
  free(path);
  return rc;
}

/* One optimizer file read and checked: its shard and moments. */
typedef struct {
  char *data; /* the whole file, owned */
  uint32_t version, world, rank;
  uint64_t step, lo, hi;
  const float *m, *v; /* (hi - lo) each, inside data */
} prm__opt_file_t;

/* Reads optim-rank-RANK.bin of dir and checks it against the model; `world`
 * 0 takes the file's world size (rank 0), else it must match. */
static int prm__opt_read(const char *dir, const prm_llama_t *m, int rank, uint32_t world,
                         prm__opt_file_t *f, prm_err_t *err) {
  memset(f, 0, sizeof *f);
  char *path = prm__rank_file(dir, "optim", rank, "bin");
  size_t len = 0;
  int rc = prm_fs_read_all(path, &f->data, &len, err);
  if (rc) goto done;
  prm__opt_hdr_t h;
  prm__opt_shard_t sh = {.rank = 0, .world = 1, .lo = 0, .hi = (uint64_t)m->nparams,
                         .total = (uint64_t)m->nparams};
  if (len < sizeof h) {
    rc = prm_errf(err, PRM_EPARSE, "%s: truncated (%zu bytes)", path, len);
    goto done;
  }
  memcpy(&h, f->data, sizeof h);
  if (memcmp(h.magic, PRM__OPT_MAGIC, 8) || h.version < 1 || h.version > PRM__OPT_VERSION) {
    rc = prm_errf(err, PRM_EPARSE, "%s: not a primus optimizer file (version %u)", path, h.version);
    goto done;
  }
  size_t head = sizeof h;
  if (h.version >= 2) {
    if (len < head + sizeof sh) {
      rc = prm_errf(err, PRM_EPARSE, "%s: truncated (%zu bytes)", path, len);
      goto done;
    }
    memcpy(&sh, f->data + head, sizeof sh);
    head += sizeof sh;
  }
  size_t payload = (size_t)m->ntensors * sizeof(uint64_t);
  size_t bytes = (size_t)h.numel * sizeof(float);
  if (h.tensors != (uint32_t)m->ntensors || sh.total != (uint64_t)m->nparams ||
      sh.lo > sh.hi || sh.hi > sh.total || h.numel != sh.hi - sh.lo ||
      len != head + payload + 2 * bytes) {
    rc = prm_errf(err, PRM_EPARSE,
                  "%s: %u tensors, moments [%llu, %llu) of %llu floats in %zu bytes; the model "
                  "has %d tensors of %lld", path, h.tensors, (unsigned long long)sh.lo,
                  (unsigned long long)sh.hi, (unsigned long long)sh.total, len, m->ntensors,
                  (long long)m->nparams);
    goto done;
  }
  if (sh.rank != (uint32_t)rank || (world && sh.world != world) || sh.world < 1) {
    rc = prm_errf(err, PRM_EPARSE, "%s: written by rank %u of %u, expected rank %d of %u", path,
                  sh.rank, sh.world, rank, world ? world : sh.world);
    goto done;
  }
  const uint64_t *sizes = (const uint64_t *)(f->data + head);
  for (int i = 0; i < m->ntensors; i++)
    if (sizes[i] != (uint64_t)m->tensors[i].numel) {
      rc = prm_errf(err, PRM_EPARSE, "%s: tensor %d (%s) has %llu moments, the model %lld", path,
                    i, m->tensors[i].name, (unsigned long long)sizes[i],
                    (long long)m->tensors[i].numel);
      goto done;
    }
  if (prm__crc(0, f->data + sizeof h, len - sizeof h) != h.crc) {
    rc = prm_errf(err, PRM_EPARSE, "%s: checksum mismatch (a damaged file)", path);
    goto done;
  }
  f->version = h.version;
  f->world = sh.world;
  f->rank = sh.rank;
  f->step = h.step;
  f->lo = sh.lo;
  f->hi = sh.hi;
  f->m = (const float *)(f->data + head + payload);
  f->v = (const float *)(f->data + head + payload + bytes);
done:
  free(path);
  if (rc) {
    free(f->data);
    f->data = NULL;
  }
  return rc;
}

/* run_id and lineage of a parsed state json ("" when absent: a checkpoint
 * of a primus that did not record them). */
static void prm__owner_from(const cJSON *root, char *run_id, char *lineage) {
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "run_id");
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(root, "lineage");
  snprintf(run_id, PRM_RUN_ID_MAX, "%s", cJSON_IsString(r) ? r->valuestring : "");
  snprintf(lineage, PRM_RUN_ID_MAX, "%s", cJSON_IsString(l) ? l->valuestring : "");
}

/* The owner of checkpoint DIR from its state-rank-00000.json; 0, or -1
 * when the file cannot be read or parsed (run_id and lineage ""). */
static int prm__owner(const char *dir, char *run_id, char *lineage) {
  char *path = prm__rank_file(dir, "state", 0, "json"), *json = NULL;
  run_id[0] = lineage[0] = 0;
  int rc = prm_fs_read_all(path, &json, NULL, NULL) ? -1 : 0;
  free(path);
  cJSON *root = rc ? NULL : cJSON_Parse(json);
  free(json);
  if (!root) return -1;
  prm__owner_from(root, run_id, lineage);
  cJSON_Delete(root);
  return 0;
}

int prm_ckpt_load_state_range(const char *dir, const prm_llama_t *m, int64_t lo, int64_t hi,
                              float *adam_m, float *adam_v, prm_ckpt_state_t *st,
                              prm_err_t *err) {
  PRM_ASSERT(0 <= lo && lo <= hi && hi <= m->nparams);
  prm__opt_file_t f;
  char *path = NULL, *json = NULL;
  cJSON *root = NULL;
  int rc;
  /* The state json first: it says whether the moments and the random
   * state were saved (no_save_optim / no_save_rng). */
  path = prm__rank_file(dir, "state", 0, "json");
  if ((rc = prm_fs_read_all(path, &json, NULL, err))) goto done;
  root = cJSON_Parse(json);
  cJSON *it = cJSON_GetObjectItem(root, "iteration"), *cs = cJSON_GetObjectItem(root, "consumed_samples");
  cJSON *seed = cJSON_GetObjectItem(root, "seed");
  int no_rng = cJSON_IsFalse(cJSON_GetObjectItem(root, "rng"));
  int no_optim = cJSON_IsFalse(cJSON_GetObjectItem(root, "optimizer"));
  if (!cJSON_IsNumber(it) || !cJSON_IsNumber(cs) || !(no_rng || cJSON_IsNumber(seed)) ||
      !(it->valuedouble >= 0 && it->valuedouble < 9e18) ||
      !(cs->valuedouble >= 0 && cs->valuedouble < 9e18) ||
      !(no_rng || (seed->valuedouble > -9e18 && seed->valuedouble < 9e18))) {
    rc = prm_errf(err, PRM_EPARSE, "%s: expected iteration, consumed_samples and seed", path);
    goto done;
  }
  uint64_t step = (uint64_t)it->valuedouble, next = 0;
  free(path);
  path = NULL;
  if (no_optim || st->skip_optim) {
    /* No moments saved, or no_load_optim: they start at zero. */
    memset(adam_m, 0, (size_t)(hi - lo) * sizeof(float));
    memset(adam_v, 0, (size_t)(hi - lo) * sizeof(float));
  } else {
    if ((rc = prm__opt_read(dir, m, 0, 0, &f, err))) goto done;
    uint32_t world = f.world;
    /* The shards must tile [0, nparams) in rank order; each is checked in
     * full (the same files and verdict on every rank), and the part inside
     * [lo, hi) is copied. */
    for (uint32_t r = 0; r < world; r++) {
      if (r > 0 && (rc = prm__opt_read(dir, m, (int)r, world, &f, err))) goto done;
      path = prm__rank_file(dir, "optim", (int)r, "bin");
      if (f.lo != next || f.step != step) {
        rc = prm_errf(err, PRM_EPARSE,
                      "%s: step %llu, moments from %llu; expected step %llu from %llu", path,
                      (unsigned long long)f.step, (unsigned long long)f.lo,
                      (unsigned long long)step, (unsigned long long)next);
        free(f.data);
        goto done;
      }
      free(path);
      path = NULL;
      next = f.hi;
      int64_t a = (int64_t)f.lo > lo ? (int64_t)f.lo : lo;
      int64_t b = (int64_t)f.hi < hi ? (int64_t)f.hi : hi;
      if (a < b) {
        memcpy(adam_m + (a - lo), f.m + (a - (int64_t)f.lo), (size_t)(b - a) * sizeof(float));
        memcpy(adam_v + (a - lo), f.v + (a - (int64_t)f.lo), (size_t)(b - a) * sizeof(float));
      }
      free(f.data);
    }
    if (next != (uint64_t)m->nparams) {
      rc = prm_errf(err, PRM_EPARSE, "%s: the %u optimizer shards end at %llu of %lld moments", dir,
                    world, (unsigned long long)next, (long long)m->nparams);
      goto done;
    }
  }
  st->iteration = (int64_t)step;
  st->consumed_samples = (int64_t)cs->valuedouble;
  st->seed = no_rng ? 0 : (int64_t)seed->valuedouble;
  st->no_rng = no_rng;
  st->no_optim = no_optim;
  prm__owner_from(root, st->run_id, st->lineage);
done:
  cJSON_Delete(root);
  free(json);
  free(path);
  return rc;
}

int prm_ckpt_load_state(const char *dir, const prm_llama_t *m, float *adam_m, float *adam_v,
                        prm_ckpt_state_t *st, prm_err_t *err) {
  return prm_ckpt_load_state_range(dir, m, 0, m->nparams, adam_m, adam_v, st, err);
}

/* The complete-looking checkpoint folders of SAVE: "iter_" and digits
 * only (not the .tmp./.old. of a save in progress), newest first. */
typedef struct {
  char *name;
  int64_t iter;
} prm__ck_t;

static int prm__by_iter_desc(const void *a, const void *b) {
  int64_t x = ((const prm__ck_t *)a)->iter, y = ((const prm__ck_t *)b)->iter;
  return x < y ? 1 : x > y ? -1 : 0;
}

static int prm__ck_list(const char *save, prm__ck_t **out, int *n, prm_err_t *err) {
  prm_argv_t names = {0};
  *out = NULL;
  *n = 0;
  int rc = prm_fs_list_dir(save, &names, err);
  if (rc) return rc;
  prm__ck_t *v = prm_xcalloc((size_t)names.n + 1, sizeof *v);
  for (int i = 0; i < names.n; i++) {
    /* Decimal with leading zeros (prm_parse_i64 would read them as octal). */
    const char *digits = names.v[i] + 5;
    char *end = NULL;
    long long it = prm_startswith(names.v[i], "iter_") ? strtoll(digits, &end, 10) : -1;
    if (it < 0 || *digits < '0' || *digits > '9' || !end || *end) continue;
    v[*n].name = prm_xstrdup(names.v[i]);
    v[(*n)++].iter = it;
  }
  prm_argv_free(&names);
  qsort(v, (size_t)*n, sizeof *v, prm__by_iter_desc);
  *out = v;
  return 0;
}

static void prm__ck_free(prm__ck_t *v, int n) {
  for (int i = 0; i < n; i++) free(v[i].name);
  free(v);
}

/* The iteration SAVE/latest_checkpointed_iteration.txt names; -1 when
 * there is no such file or it does not hold a number (said once). */
static int64_t prm__tracker(const char *save) {
  char *path = prm_path_join(save, "latest_checkpointed_iteration.txt"), *text = NULL;
  int64_t it = -1;
  if (prm_fs_exists(path) && prm_fs_read_all(path, &text, NULL, NULL) == 0 &&
      (prm_parse_i64(prm_strtrim(text), &it) || it < 0)) {
    PRM_WARN("%s: expected an iteration number; looking at every checkpoint instead", path);
    it = -1;
  }
  free(text);
  free(path);
  return it;
}

static int prm__done(const char *dir) {
  char *done = prm_path_join(dir, "DONE");
  int yes = prm_fs_exists(done);
  free(done);
  return yes;
}

int prm_ckpt_resume(prm_llama_t *m, const char *save, float *adam_m, float *adam_v,
                    prm_ckpt_state_t *st, prm_err_t *err) {
  return prm_ckpt_resume_range(m, save, 0, m->nparams, adam_m, adam_v, st, err);
}

int prm_ckpt_resume_range(prm_llama_t *m, const char *save, int64_t lo, int64_t hi,
                          float *adam_m, float *adam_v, prm_ckpt_state_t *st, prm_err_t *err) {
  st->iteration = st->consumed_samples = 0;
  st->run_id[0] = st->lineage[0] = 0;
  if (!prm_fs_is_dir(save)) return 0; /* nothing saved yet: a fresh start */
  prm__ck_t *v;
  int n;
  int rc = prm__ck_list(save, &v, &n, err);
  if (rc) return rc;
  /* The tracker is the authority: a folder above it was never this
   * chain's newest (another run's, or a save whose tracker update was cut
   * short), so it is not resumed. */
  int64_t tracker = prm__tracker(save);
  int found = tracker < 0;
  for (int i = 0; i < n; i++) found |= v[i].iter == tracker;
  if (!found)
    PRM_WARN("%s/latest_checkpointed_iteration.txt names iteration %lld, which is not there; "
             "looking at the checkpoints before it", save, (long long)tracker);
  for (int i = 0; i < n; i++) {
    char *dir = prm_path_join(save, v[i].name);
    char run_id[PRM_RUN_ID_MAX], lineage[PRM_RUN_ID_MAX];
    prm_err_t e = {0};
    if (tracker >= 0 && v[i].iter > tracker) {
      PRM_INFO("%s: not resumed: newer than latest_checkpointed_iteration.txt (%lld), so not "
               "this chain's", dir, (long long)tracker);
    } else if (!prm__done(dir)) {
      PRM_WARN("%s: no DONE marker (an interrupted save); skipped", dir);
    } else if (st->only_run && (prm__owner(dir, run_id, lineage) || strcmp(run_id, st->only_run))) {
      PRM_INFO("%s: not resumed: written by %s, not by this run (%s)", dir,
               run_id[0] ? run_id : "another run", st->only_run);
    } else if (prm_ckpt_load_hf(m, dir, &e) || prm_ckpt_load_state_range(dir, m, lo, hi, adam_m, adam_v, st, &e)) {
      PRM_WARN("%s: skipped: %s", dir, e.msg);
    } else {
      PRM_INFO("resuming from %s (iteration %lld, %lld samples consumed)", dir,
               (long long)st->iteration, (long long)st->consumed_samples);
      free(dir);
      prm__ck_free(v, n);
      return 0;
    }
    free(dir);
  }
  prm__ck_free(v, n);
  st->iteration = st->consumed_samples = 0;
  st->run_id[0] = st->lineage[0] = 0;
  return 0;
}

int prm_ckpt_newest_other(const char *save, const char *except, char **dir, int64_t *iter) {
  prm__ck_t *v;
  int n, found = 0;
  *dir = NULL;
  *iter = 0;
  if (!prm_fs_is_dir(save) || prm__ck_list(save, &v, &n, NULL)) return 0;
  for (int i = 0; i < n && !found; i++) {
    char *d = prm_path_join(save, v[i].name);
    char run_id[PRM_RUN_ID_MAX], lineage[PRM_RUN_ID_MAX];
    if (prm__done(d) && (!except || prm__owner(d, run_id, lineage) || strcmp(run_id, except))) {
      *dir = d;
      *iter = v[i].iter;
      found = 1;
    } else {
      free(d);
    }
  }
  prm__ck_free(v, n);
  return found;
}

int prm_ckpt_prune(const char *save, int64_t keep, const char *lineage, prm_err_t *err) {
  if (keep <= 0) return 0;
  prm__ck_t *v;
  int n;
  int rc = prm__ck_list(save, &v, &n, err);
  if (rc) return rc;
  int64_t complete = 0;
  for (int i = 0; i < n; i++) {
    char *dir = prm_path_join(save, v[i].name);
    char run_id[PRM_RUN_ID_MAX], line[PRM_RUN_ID_MAX];
    /* Another lineage's checkpoints are neither counted nor removed. */
    int mine = !lineage || (!prm__owner(dir, run_id, line) &&
                            !strcmp(line[0] ? line : run_id, lineage));
    if (mine && prm__done(dir) && ++complete > keep) {
      /* DONE goes first: a removal cut short leaves a folder that resume
       * skips, never one that looks complete. */
      char *done = prm_path_join(dir, "DONE");
      unlink(done);
      free(done);
      prm_fs_rm_rf(dir);
      PRM_INFO("ckpt_keep %lld: removed %s", (long long)keep, dir);
    }
    free(dir);
  }
  prm__ck_free(v, n);
  return prm_fs_fsync_dir(save, err);
}
