/* ref64.h - the reference kernels in double precision, for
 * finite-difference gradient checks and as the yardstick the fp32 kernels
 * are compared against. Names are prm_ref64_<op> with the argument order of
 * the public fp32 kernels (primus/prm_kernels.h); RoPE tables are double.
 */
#ifndef PRM_KERNELS_REF64_H
#define PRM_KERNELS_REF64_H

#define PRM_REF_DOUBLE 1
#include "kernels/ref-decl.h"
#undef PRM_REF_DOUBLE

#endif
