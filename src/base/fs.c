/* fs.c - files and paths: whole-file reads, atomic writes (tmp, fsync,
 * rename, fsync the folder), mkdir -p, listing, and the project home. */
#define _GNU_SOURCE
#include "primus/prm_base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int prm_fs_read_all(const char *path, char **out, size_t *len, prm_err_t *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return prm_errf(err, errno == ENOENT ? PRM_ENOENT : PRM_EIO, "%s: %s", path,
                    strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    close(fd);
    return prm_errf(err, PRM_EIO, "%s: not a regular file", path);
  }
  prm_sb_t sb = {0};
  char buf[65536];
  for (;;) {
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      prm_sb_free(&sb);
      return prm_errf(err, PRM_EIO, "%s: read failed: %s", path, strerror(e));
    }
    if (r == 0) break;
    prm_sb_appendn(&sb, buf, (size_t)r);
  }
  close(fd);
  if (len) *len = sb.len;
  *out = prm_sb_steal(&sb);
  return 0;
}

int prm_fs_fsync_dir(const char *dir, prm_err_t *err) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return prm_errf(err, PRM_EIO, "%s: %s", dir, strerror(errno));
  int r = fsync(fd);
  int e = errno;
  close(fd);
  if (r != 0 && e != EINVAL)
    return prm_errf(err, PRM_EIO, "%s: fsync: %s", dir, strerror(e));
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Files published atomically                                                */
/* ------------------------------------------------------------------------ */

int prm_afile_open(prm_afile_t *f, const char *path, prm_err_t *err) {
  f->path = prm_xstrdup(path);
  f->tmp = prm_xasprintf("%s.tmp.%d", path, (int)getpid());
  f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f->fd >= 0) return 0;
  int rc = prm_errf(err, PRM_EIO, "%s: cannot create: %s", f->tmp, strerror(errno));
  free(f->path);
  free(f->tmp);
  f->path = f->tmp = NULL;
  return rc;
}

int prm_afile_write(prm_afile_t *f, const void *data, size_t len, prm_err_t *err) {
  const char *p = data;
  while (len) {
    ssize_t w = write(f->fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return prm_errf(err, PRM_EIO, "%s: write failed: %s", f->path, strerror(errno));
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

int prm_afile_sync(prm_afile_t *f, prm_err_t *err) {
  if (f->fd < 0) return 0;
  int rc = 0;
  if (fsync(f->fd) != 0) rc = prm_errf(err, PRM_EIO, "%s: fsync: %s", f->path, strerror(errno));
  if (close(f->fd) != 0 && !rc)
    rc = prm_errf(err, PRM_EIO, "%s: close: %s", f->path, strerror(errno));
  f->fd = -1;
  return rc;
}

int prm_afile_commit(prm_afile_t *f, prm_err_t *err) {
  int rc = prm_afile_sync(f, err);
  if (!rc && rename(f->tmp, f->path) != 0)
    rc = prm_errf(err, PRM_EIO, "%s: rename: %s", f->path, strerror(errno));
  if (rc) {
    prm_afile_abort(f);
    return rc;
  }
  char *dir = prm_path_dirname(f->path);
  rc = prm_fs_fsync_dir(dir, err);
  free(dir);
  free(f->path);
  free(f->tmp);
  f->path = f->tmp = NULL;
  return rc;
}

void prm_afile_abort(prm_afile_t *f) {
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
  if (f->tmp) unlink(f->tmp);
  free(f->path);
  free(f->tmp);
  f->path = f->tmp = NULL;
}

int prm_fs_write_atomic(const char *path, const void *data, size_t len,
                        prm_err_t *err) {
  prm_afile_t f;
  int rc = prm_afile_open(&f, path, err);
  if (rc) return rc;
  if ((rc = prm_afile_write(&f, data, len, err))) {
    prm_afile_abort(&f);
    return rc;
  }
  return prm_afile_commit(&f, err);
}

int prm_fs_mkdir_p(const char *path, int mode, prm_err_t *err) {
  char *p = prm_xstrdup(path);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, (mode_t)mode) != 0 && errno != EEXIST) goto fail;
    *s = '/';
  }
  if (mkdir(p, (mode_t)mode) != 0 && errno != EEXIST) goto fail;
  if (!prm_fs_is_dir(p)) {
    errno = ENOTDIR;
    goto fail;
  }
  free(p);
  return 0;
fail:;
  int rc = prm_errf(err, PRM_EIO, "%s: cannot create folder: %s", p, strerror(errno));
  free(p);
  return rc;
}

int prm_fs_copy(const char *src, const char *dst, prm_err_t *err) {
  char *data;
  size_t len;
  int rc = prm_fs_read_all(src, &data, &len, err);
  if (rc) return rc;
  rc = prm_fs_write_atomic(dst, data, len, err);
  free(data);
  return rc;
}

int prm_fs_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

int prm_fs_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int prm_fs_is_executable(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

char *prm_path_join(const char *a, const char *b) {
  if (!a || !*a) return prm_xstrdup(b);
  if (b[0] == '/') return prm_xstrdup(b);
  size_t n = strlen(a);
  return prm_xasprintf("%s%s%s", a, a[n - 1] == '/' ? "" : "/", b);
}

char *prm_path_dirname(const char *path) {
  const char *s = strrchr(path, '/');
  if (!s) return prm_xstrdup(".");
  if (s == path) return prm_xstrdup("/");
  return prm_xstrndup(path, (size_t)(s - path));
}

const char *prm_path_basename(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

char *prm_path_abs(const char *path) {
  prm_sb_t in = {0};
  if (path[0] != '/') {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) strcpy(cwd, "/");
    prm_sb_append(&in, cwd);
    prm_sb_putc(&in, '/');
  }
  prm_sb_append(&in, path);
  /* Normalise: drop "." and empty parts, resolve "..". */
  char *s = prm_sb_steal(&in);
  char **parts = prm_xmalloc(sizeof(char *) * (strlen(s) + 1));
  int n = 0;
  for (char *save = NULL, *t = strtok_r(s, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
    if (!strcmp(t, ".")) continue;
    if (!strcmp(t, "..")) {
      if (n) n--;
      continue;
    }
    parts[n++] = t;
  }
  prm_sb_t out = {0};
  for (int i = 0; i < n; i++) {
    prm_sb_putc(&out, '/');
    prm_sb_append(&out, parts[i]);
  }
  if (!n) prm_sb_putc(&out, '/');
  free(parts);
  free(s);
  return prm_sb_steal(&out);
}

char *prm_which(const char *name) {
  if (strchr(name, '/')) return prm_fs_is_executable(name) ? prm_xstrdup(name) : NULL;
  const char *path = getenv("PATH");
  if (!path) path = "/usr/local/bin:/usr/bin:/bin";
  char *copy = prm_xstrdup(path);
  char *found = NULL;
  for (char *save = NULL, *d = strtok_r(copy, ":", &save); d && !found;
       d = strtok_r(NULL, ":", &save)) {
    char *c = prm_path_join(*d ? d : ".", name);
    if (prm_fs_is_executable(c))
      found = c;
    else
      free(c);
  }
  free(copy);
  return found;
}

static int prm__cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int prm_fs_list_dir(const char *dir, prm_argv_t *out, prm_err_t *err) {
  DIR *d = opendir(dir);
  if (!d)
    return prm_errf(err, errno == ENOENT ? PRM_ENOENT : PRM_EIO, "%s: %s", dir,
                    strerror(errno));
  struct dirent *e;
  int start = out->n;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) prm_argv_push(out, e->d_name);
  closedir(d);
  if (out->n > start)
    qsort(out->v + start, (size_t)(out->n - start), sizeof(char *), prm__cmp_str);
  return 0;
}

int prm_fs_rm_rf(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return 0;
  if (S_ISDIR(st.st_mode)) {
    prm_argv_t names = {0};
    prm_fs_list_dir(path, &names, NULL);
    for (int i = 0; i < names.n; i++) {
      char *c = prm_path_join(path, names.v[i]);
      prm_fs_rm_rf(c);
      free(c);
    }
    prm_argv_free(&names);
    return rmdir(path) == 0 ? 0 : PRM_EIO;
  }
  return unlink(path) == 0 ? 0 : PRM_EIO;
}

/* ---- project home ------------------------------------------------------ */

static int prm__has_configs(const char *dir) {
  char *c = prm_path_join(dir, "configs/modules");
  int ok = prm_fs_is_dir(c);
  free(c);
  return ok;
}

const char *prm_home(void) {
  static char *home;
  if (home) return home;
  const char *env = getenv("PRIMUS_HOME");
  if (env && *env) return home = prm_xstrdup(env);
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    char *bin = prm_path_dirname(exe);
    char *up = prm_path_join(bin, "..");
    char *upn = prm_path_abs(up);
    char *share = prm_path_join(upn, "share/primus");
    if (prm__has_configs(upn))
      home = prm_xstrdup(upn);
    else if (prm__has_configs(share))
      home = prm_xstrdup(share);
    free(bin);
    free(up);
    free(upn);
    free(share);
    if (home) return home;
  }
#ifdef PRM_SOURCE_DIR
  return home = prm_xstrdup(PRM_SOURCE_DIR);
#else
  return home = prm_xstrdup(".");
#endif
}

char *prm_cache_path(const char *rel) {
  const char *cache = getenv("PRIMUS_CACHE");
  if (cache && *cache) return prm_path_join(cache, rel);
  const char *home = getenv("HOME");
  return prm_xasprintf("%s/.cache/primus/%s", home && *home ? home : ".", rel);
}
