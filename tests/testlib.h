/* testlib.h - shared helpers for the cmocka unit tests: temporary folders
 * that are removed at exit, and small file helpers. */
#ifndef PRM_TESTLIB_H
#define PRM_TESTLIB_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "primus/prm_base.h"

/* A fresh folder under $TMPDIR (or /tmp), removed when the program exits.
 * Returned string lives until exit. */
const char *prm_test_tmpdir(void);
/* Writes text to dir/name (creating folders) and returns the full path
 * (caller frees). Fails the test on error. */
char *prm_test_write(const char *dir, const char *name, const char *text);
/* Reads a whole file into a NUL-terminated string (caller frees). */
char *prm_test_read(const char *path);
/* Copies the stand-in tools of fixtures/<rel> into <tmpdir>/tools-<name>
 * with exec bits set (so they do not depend on the checkout) and returns
 * that folder (caller frees). */
char *prm_test_tool_dir(const char *rel, const char *name);

/* Asserts that a equals the NULL-terminated list want and is itself
 * NULL-terminated, printing both on a mismatch so a failure shows the whole
 * command. */
void prm_test_assert_argv(const prm_argv_t *a, const char *const *want);

#endif
