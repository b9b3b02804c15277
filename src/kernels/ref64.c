/* ref64.c - the reference kernels in double precision (prm_ref64_*), for
 * finite-difference tests. */
#include "kernels/ref64.h"

#define PRM_REF_DOUBLE 1
#include "kernels/ref-impl.h"
