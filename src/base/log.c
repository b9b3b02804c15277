/* log.c - the rank-aware log sink: one line format, console filter, and a
 * per-rank file. This sink is one of the few process globals. */
#define _GNU_SOURCE
#include "primus/prm_base.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static struct {
  prm_log_level_t level;
  int rank, world;
  int color;
  FILE *file; /* this rank's log file */
  FILE *tee;  /* a second file the user asked for (--log-file) */
  int bar;    /* a progress bar is on the console's last line */
} prm__log = {PRM_LOG_INFO, 0, 1, -1, NULL, NULL, 0};
/* Lines come whole from any thread (the trainer's background checkpoint
 * writer logs too). */
static pthread_mutex_t prm__log_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *const prm__level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
_Static_assert(sizeof(prm__level_names) / sizeof(prm__level_names[0]) ==
                   PRM_LOG__COUNT, "log level names");
static const char *const prm__level_colors[] = {"\033[2m", "", "\033[33m",
                                                "\033[31m"};

int prm_log_parse_level(const char *s, prm_log_level_t *out) {
  if (!s) return PRM_EINVAL;
  for (int i = 0; i < PRM_LOG__COUNT; i++)
    if (!strcasecmp(s, prm__level_names[i])) return *out = (prm_log_level_t)i, 0;
  if (!strcasecmp(s, "warning")) return *out = PRM_LOG_WARN, 0;
  return PRM_EINVAL;
}

void prm_log_init(void) {
  const char *lv = getenv("PRIMUS_LOG_LEVEL");
  prm_log_level_t l;
  if (lv && *lv && prm_log_parse_level(lv, &l) == 0) prm__log.level = l;
}

void prm_log_set_level(prm_log_level_t level) { prm__log.level = level; }
prm_log_level_t prm_log_get_level(void) { return prm__log.level; }

void prm_log_set_rank(int rank, int world) {
  prm__log.rank = rank;
  prm__log.world = world > 0 ? world : 1;
}

void prm_log_set_launcher(void) { prm__log.rank = -1; }

/* "rank R/N host", or "launcher host" for a launcher of several ranks. */
static const char *prm__log_tag(char *buf, size_t n) {
  if (prm__log.rank < 0) snprintf(buf, n, "launcher %s", prm_hostname());
  else snprintf(buf, n, "rank %d/%d %s", prm__log.rank, prm__log.world, prm_hostname());
  return buf;
}

int prm_log_set_file(const char *path, prm_err_t *err) {
  FILE *f = fopen(path, "a");
  if (!f) return prm_errf(err, PRM_EIO, "%s: cannot open log file: %m", path);
  setvbuf(f, NULL, _IOLBF, 0);
  if (prm__log.file) fclose(prm__log.file);
  prm__log.file = f;
  return 0;
}

int prm_log_tee_file(const char *path, prm_err_t *err) {
  FILE *f = fopen(path, "a");
  if (!f) return prm_errf(err, PRM_EIO, "%s: cannot open log file: %m", path);
  setvbuf(f, NULL, _IOLBF, 0);
  if (prm__log.tee) fclose(prm__log.tee);
  prm__log.tee = f;
  return 0;
}

void prm_log_close_file(void) {
  if (prm__log.file) fclose(prm__log.file);
  if (prm__log.tee) fclose(prm__log.tee);
  prm__log.file = prm__log.tee = NULL;
}

static int prm__log_color(void) {
  if (prm__log.color < 0)
    prm__log.color = isatty(STDERR_FILENO) && !getenv("NO_COLOR");
  return prm__log.color;
}

void prm_vlog(prm_log_level_t level, const char *fmt, va_list ap) {
  if (level < prm__log.level && !prm__log.file && !prm__log.tee) return;
  char ts[32], msg[4096];
  prm_time_format(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", prm_time_wall());
  vsnprintf(msg, sizeof msg, fmt, ap);
  const char *name = prm__level_names[level];
  char tag[320];
  prm__log_tag(tag, sizeof tag);
  pthread_mutex_lock(&prm__log_mu);
  FILE *files[2] = {prm__log.file, prm__log.tee};
  for (int i = 0; i < 2; i++)
    if (files[i])
      fprintf(files[i], "[%s] [%s] [%s] %s\n", ts, tag, name, msg);
  if (level < prm__log.level) goto out;
  /* Console: rank 0 and the last rank only, like Primus' rank filter;
   * errors always pass. */
  int show = prm__log.rank <= 0 || prm__log.rank == prm__log.world - 1 ||
             level >= PRM_LOG_ERROR;
  if (!show) goto out;
  if (prm__log.bar) { /* the line replaces the bar; the next draw brings it back */
    fputs("\r\033[K", stderr);
    prm__log.bar = 0;
  }
  if (prm__log_color())
    fprintf(stderr, "%s[%s] [%s] [%s] %s\033[0m\n", prm__level_colors[level], ts, tag, name, msg);
  else
    fprintf(stderr, "[%s] [%s] [%s] %s\n", ts, tag, name, msg);
out:
  pthread_mutex_unlock(&prm__log_mu);
}

void prm_log_files(prm_log_level_t level, const char *fmt, ...) {
  if (!prm__log.file && !prm__log.tee) return;
  char ts[32], msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  prm_time_format(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", prm_time_wall());
  char tag[320];
  prm__log_tag(tag, sizeof tag);
  pthread_mutex_lock(&prm__log_mu);
  FILE *files[2] = {prm__log.file, prm__log.tee};
  for (int i = 0; i < 2; i++)
    if (files[i])
      fprintf(files[i], "[%s] [%s] [%s] %s\n", ts, tag, prm__level_names[level], msg);
  pthread_mutex_unlock(&prm__log_mu);
}

void prm_log(prm_log_level_t level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  prm_vlog(level, fmt, ap);
  va_end(ap);
}

/* ------------------------------------------------------------------------ */
/* Progress bar                                                              */
/* ------------------------------------------------------------------------ */

int prm_progress_tty(void) { return isatty(STDERR_FILENO); }

void prm_progress(double fraction, const char *fmt, ...) {
  if (!prm_progress_tty() || prm__log.rank != 0) return;
  char bar[40] = "";
  if (fraction >= 0) { /* [#####---------------]  25% */
    if (fraction > 1) fraction = 1;
    int fill = (int)(fraction * 20);
    bar[0] = '[';
    for (int i = 0; i < 20; i++) bar[i + 1] = i < fill ? '#' : '-';
    snprintf(bar + 21, sizeof bar - 21, "] %3d%% ", (int)(fraction * 100));
  }
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&prm__log_mu);
  fprintf(stderr, "\r\033[K%s", bar);
  vfprintf(stderr, fmt, ap);
  fflush(stderr);
  prm__log.bar = 1;
  pthread_mutex_unlock(&prm__log_mu);
  va_end(ap);
}

void prm_progress_end(void) {
  pthread_mutex_lock(&prm__log_mu);
  if (prm__log.bar) {
    fputc('\n', stderr);
    fflush(stderr);
    prm__log.bar = 0;
  }
  pthread_mutex_unlock(&prm__log_mu);
}
