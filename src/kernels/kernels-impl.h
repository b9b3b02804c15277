/* kernels-impl.h - internals shared by the kernel files: the fp32
 * instantiation of the reference kernels (prm__ref32_*), which the public
 * kernels call until faster variants replace them. */
#ifndef PRM_KERNELS_IMPL_H
#define PRM_KERNELS_IMPL_H

#include "primus/prm_kernels.h"

#define PRM_REF_DOUBLE 0
#include "kernels/ref-decl.h"
#undef PRM_REF_DOUBLE

#endif
