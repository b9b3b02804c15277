/* ref32.c - the reference kernels in fp32 (prm__ref32_*), the twins every
 * faster kernel is checked against; the public kernels call them for now. */
#include "kernels/kernels-impl.h"

#define PRM_REF_DOUBLE 0
#include "kernels/ref-impl.h"
