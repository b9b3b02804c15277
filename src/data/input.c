/* input.c - raw inputs for preprocessing: plain text, gzip (zlib inflate)
 * and zstd (streaming decompression) read through one buffered stream,
 * line by line or whole, and FILE|GLOB patterns expanded in a stable
 * order. Nothing seeks, so pipes and FIFOs are inputs too. */
#define _GNU_SOURCE
#include "primus/prm_data.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

enum { PRM__IN_RAW = 1 << 18, PRM__IN_OUT = 1 << 20 };

typedef enum { PRM__FMT_PLAIN, PRM__FMT_GZIP, PRM__FMT_ZSTD, PRM__FMT__COUNT } prm__fmt_t;
static const char *const prm__fmt_names[] = {"plain", "gzip", "zstd"};
_Static_assert(PRM__FMT__COUNT == 3, "one name per input format");

struct prm_input {
  char *path;
  int fd;
  prm__fmt_t fmt;
  /* Compressed (or plain) bytes from the file. */
  uint8_t *raw;
  size_t raw_pos, raw_len;
  int raw_eof;
  /* Decoded bytes not yet returned. */
  char *out;
  size_t out_pos, out_len;
  int eof;           /* decoder finished and out drained to the end */
  z_stream zs;
  int zs_live, zs_member_done; /* a gzip member ended; another may follow */
  ZSTD_DCtx *zd;
  size_t zd_hint;    /* last ZSTD_decompressStream result: 0 at a frame end */
  /* Lines. */
  char *line;
  size_t line_cap;
  int64_t lineno;
  int64_t offset; /* decoded bytes returned */
  int64_t raw_read; /* bytes read from the file */
};

/* Reads more raw bytes after the unread ones. Returns 0 (raw_eof set at the
 * end) or an error. */
static int prm__in_fill_raw(prm_input_t *in, prm_err_t *err) {
  if (in->raw_pos > 0) {
    memmove(in->raw, in->raw + in->raw_pos, in->raw_len - in->raw_pos);
    in->raw_len -= in->raw_pos;
    in->raw_pos = 0;
  }
  if (in->raw_len == PRM__IN_RAW || in->raw_eof) return 0;
  ssize_t r = read(in->fd, in->raw + in->raw_len, PRM__IN_RAW - in->raw_len);
  if (r < 0)
    return prm_errf(err, errno == EINTR ? PRM_ERUNTIME : PRM_EIO, "%s: read: %s", in->path,
                    strerror(errno));
  if (r == 0) in->raw_eof = 1;
  in->raw_len += (size_t)r;
  in->raw_read += r;
  return 0;
}

int prm_input_open(const char *path, prm_input_t **out, prm_err_t *err) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return prm_errf(err, errno == ENOENT ? PRM_ENOENT : PRM_EIO, "%s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    close(fd);
    return prm_errf(err, PRM_EINVAL, "%s: is a folder, expected a file", path);
  }
  prm_input_t *in = prm_xcalloc(1, sizeof *in);
  in->path = prm_xstrdup(path);
  in->fd = fd;
  in->raw = prm_xmalloc(PRM__IN_RAW);
  in->out = prm_xmalloc(PRM__IN_OUT);
  int rc = 0;
  /* Peek at the magic: read until 4 bytes are there or the file ends. */
  while (!rc && in->raw_len < 4 && !in->raw_eof) rc = prm__in_fill_raw(in, err);
  if (rc) goto fail;
  static const uint8_t gz_magic[2] = {0x1f, 0x8b}, zst_magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
  int is_gz = in->raw_len >= 2 && !memcmp(in->raw, gz_magic, 2);
  int is_zst = in->raw_len >= 4 && !memcmp(in->raw, zst_magic, 4);
  if (prm_endswith(path, ".gz") && !is_gz) {
    rc = prm_errf(err, PRM_EPARSE, "%s: named .gz but is not gzip data (no 1f 8b magic)", path);
    goto fail;
  }
  if (prm_endswith(path, ".zst") && !is_zst) {
    rc = prm_errf(err, PRM_EPARSE, "%s: named .zst but is not zstd data (no 28 b5 2f fd magic)",
                  path);
    goto fail;
  }
  if (is_gz) {
    in->fmt = PRM__FMT_GZIP;
    if (inflateInit2(&in->zs, 15 + 16) != Z_OK) {
      rc = prm_errf(err, PRM_ENOMEM, "%s: cannot start the gzip decoder", path);
      goto fail;
    }
    in->zs_live = 1;
  } else if (is_zst) {
    in->fmt = PRM__FMT_ZSTD;
    if (!(in->zd = ZSTD_createDCtx())) {
      rc = prm_errf(err, PRM_ENOMEM, "%s: cannot start the zstd decoder", path);
      goto fail;
    }
  }
  *out = in;
  return 0;
fail:
  prm_input_close(in);
  return rc;
}

void prm_input_close(prm_input_t *in) {
  if (!in) return;
  if (in->zs_live) inflateEnd(&in->zs);
  ZSTD_freeDCtx(in->zd);
  close(in->fd);
  free(in->path);
  free(in->raw);
  free(in->out);
  free(in->line);
  free(in);
}

const char *prm_input_format(const prm_input_t *in) { return prm__fmt_names[in->fmt]; }

int64_t prm_input_lineno(const prm_input_t *in) { return in->lineno; }

int64_t prm_input_offset(const prm_input_t *in) { return in->offset; }

int64_t prm_input_raw_offset(const prm_input_t *in) {
  return in->raw_read - (int64_t)(in->raw_len - in->raw_pos);
}

/* Decodes more bytes into out (after moving the unread ones to the front).
 * Sets in->eof when the input is exhausted and out holds nothing more. */
static int prm__in_fill(prm_input_t *in, prm_err_t *err) {
  if (in->out_pos > 0) {
    memmove(in->out, in->out + in->out_pos, in->out_len - in->out_pos);
    in->out_len -= in->out_pos;
    in->out_pos = 0;
  }
  size_t before = in->out_len;
  while (in->out_len == before && in->out_len < PRM__IN_OUT) {
    int rc;
    if (in->raw_pos == in->raw_len && !in->raw_eof && (rc = prm__in_fill_raw(in, err)))
      return rc;
    size_t avail = in->raw_len - in->raw_pos;
    if (in->fmt == PRM__FMT_PLAIN) {
      if (!avail) break;
      size_t n = avail < PRM__IN_OUT - in->out_len ? avail : PRM__IN_OUT - in->out_len;
      memcpy(in->out + in->out_len, in->raw + in->raw_pos, n);
      in->out_len += n;
      in->raw_pos += n;
    } else if (in->fmt == PRM__FMT_GZIP) {
      if (!avail) {
        if (!in->zs_member_done)
          return prm_errf(err, PRM_EPARSE, "%s: gzip data ends early (truncated file?)",
                          in->path);
        break;
      }
      if (in->zs_member_done) { /* concatenated members, as gzip -c a b does */
        inflateReset(&in->zs);
        in->zs_member_done = 0;
      }
      in->zs.next_in = in->raw + in->raw_pos;
      in->zs.avail_in = (uInt)avail;
      in->zs.next_out = (Bytef *)in->out + in->out_len;
      in->zs.avail_out = (uInt)(PRM__IN_OUT - in->out_len);
      int zr = inflate(&in->zs, Z_NO_FLUSH);
      in->raw_pos = in->raw_len - in->zs.avail_in;
      in->out_len = PRM__IN_OUT - in->zs.avail_out;
      if (zr == Z_STREAM_END) in->zs_member_done = 1;
      else if (zr != Z_OK && zr != Z_BUF_ERROR)
        return prm_errf(err, PRM_EPARSE, "%s: bad gzip data: %s", in->path,
                        in->zs.msg ? in->zs.msg : zError(zr));
    } else {
      if (!avail) {
        if (in->zd_hint != 0)
          return prm_errf(err, PRM_EPARSE, "%s: zstd data ends early (truncated file?)",
                          in->path);
        break;
      }
      ZSTD_inBuffer ib = {in->raw, in->raw_len, in->raw_pos};
      ZSTD_outBuffer ob = {in->out, PRM__IN_OUT, in->out_len};
      size_t zr = ZSTD_decompressStream(in->zd, &ob, &ib);
      if (ZSTD_isError(zr))
        return prm_errf(err, PRM_EPARSE, "%s: bad zstd data: %s", in->path,
                        ZSTD_getErrorName(zr));
      in->zd_hint = zr;
      in->raw_pos = ib.pos;
      in->out_len = ob.pos;
    }
  }
  if (in->out_len == 0) in->eof = 1;
  return 0;
}

int prm_input_getline(prm_input_t *in, const char **line, size_t *len, prm_err_t *err) {
  *line = NULL;
  *len = 0;
  size_t n = 0;
  int got = 0;
  for (;;) {
    if (in->out_pos == in->out_len) {
      if (in->eof) break;
      int rc = prm__in_fill(in, err);
      if (rc) return rc;
      if (in->eof) break;
    }
    const char *s = in->out + in->out_pos;
    size_t avail = in->out_len - in->out_pos;
    const char *nl = memchr(s, '\n', avail);
    size_t take = nl ? (size_t)(nl - s) : avail;
    if (n + take + 1 > in->line_cap) {
      size_t cap = in->line_cap ? in->line_cap : 4096;
      while (cap < n + take + 1) cap *= 2;
      in->line = prm_xrealloc(in->line, cap);
      in->line_cap = cap;
    }
    memcpy(in->line + n, s, take);
    n += take;
    got = 1;
    in->out_pos += take + (nl ? 1 : 0);
    in->offset += (int64_t)(take + (nl ? 1 : 0));
    if (nl) break;
  }
  if (!got) return 0;
  in->line[n] = '\0';
  in->lineno++;
  *line = in->line;
  *len = n;
  return 1;
}

int prm_input_read_all(prm_input_t *in, char **out, size_t *len, prm_err_t *err) {
  *out = NULL;
  *len = 0;
  prm_sb_t sb = {0};
  for (;;) {
    if (in->out_pos == in->out_len) {
      if (in->eof) break;
      int rc = prm__in_fill(in, err);
      if (rc) {
        prm_sb_free(&sb);
        return rc;
      }
      if (in->eof) break;
    }
    prm_sb_appendn(&sb, in->out + in->out_pos, in->out_len - in->out_pos);
    in->offset += (int64_t)(in->out_len - in->out_pos);
    in->out_pos = in->out_len;
  }
  *len = sb.len;
  *out = sb.buf ? prm_sb_steal(&sb) : prm_xstrdup("");
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Patterns                                                                  */
/* ------------------------------------------------------------------------ */

int prm_input_expand(char *const *patterns, int n, prm_argv_t *out, prm_err_t *err) {
  for (int i = 0; i < n; i++) {
    glob_t g;
    memset(&g, 0, sizeof g);
    int gr = glob(patterns[i], GLOB_ERR | GLOB_MARK, NULL, &g);
    if (gr == GLOB_ABORTED) { /* a folder of the pattern is missing or unreadable */
      globfree(&g);
      memset(&g, 0, sizeof g);
      if ((gr = glob(patterns[i], GLOB_MARK, NULL, &g)) == GLOB_NOMATCH) {
        char *dir = prm_path_dirname(patterns[i]);
        int missing = !strpbrk(dir, "*?[") && !prm_fs_is_dir(dir);
        int rc = prm_errf(err, PRM_ENOENT, "--input %s: no such file (the pattern matched "
                          "nothing%s%s%s)", patterns[i], missing ? "; " : "",
                          missing ? dir : "", missing ? " is not a folder" : "");
        free(dir);
        globfree(&g);
        return rc;
      }
    }
    struct stat st;
    if (gr == GLOB_NOMATCH && stat(patterns[i], &st) == 0 && !S_ISDIR(st.st_mode)) {
      globfree(&g); /* a file whose name looks like a pattern ("a[1].txt") */
      prm_argv_push(out, patterns[i]);
      continue;
    }
    if (gr == GLOB_NOMATCH) {
      globfree(&g);
      return prm_errf(err, PRM_ENOENT, "--input %s: no such file (the pattern matched nothing)",
                      patterns[i]);
    }
    if (gr != 0) {
      globfree(&g);
      return prm_errf(err, gr == GLOB_NOSPACE ? PRM_ENOMEM : PRM_EIO,
                      "--input %s: cannot expand the pattern (%s)", patterns[i],
                      gr == GLOB_NOSPACE ? "out of memory" : "read error");
    }
    for (size_t j = 0; j < g.gl_pathc; j++) {
      const char *p = g.gl_pathv[j];
      if (prm_endswith(p, "/")) {
        int rc = prm_errf(err, PRM_EINVAL, "--input %s: %s is a folder, expected files",
                          patterns[i], p);
        globfree(&g);
        return rc;
      }
      prm_argv_push(out, p);
    }
    globfree(&g);
  }
  return 0;
}
