/* analyze-impl.h - shared inside src/analyze: the run-directory scanner
 * (scan.c) hands evidence to the classifier and the writers (report.c). */
#ifndef PRM_ANALYZE_IMPL_H
#define PRM_ANALYZE_IMPL_H

#include "primus/prm_analyze.h"

/* "SIGABRT" for 6; "SIG<n>" for numbers without a name. */
void prm__an_signame(int sig, char *buf, size_t n);

#endif
