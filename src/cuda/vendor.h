/* vendor.h - the one place that names the GPU vendor's runtime and BLAS.
 *
 * The .cu files of the module use the neutral names below (gpuMalloc,
 * gpuStream_t, gpublasGemmEx, PRM_SHFL_XOR ...), never cuda* / cublas* /
 * hip* directly, so that NVIDIA's nvcc (default) and AMD's hipcc (with
 * -DPRM_HIP) compile the same kernels. Only the CUDA side is built and
 * tested today; the HIP side maps the same names to HIP 6 / hipBLAS 2
 * (HIPBLAS_V2 types) and has not been compiled yet.
 *
 * Warp-level code in the module only ever exchanges values within groups of
 * at most 8 consecutive lanes, so it is correct for 32-lane (NVIDIA) and
 * 64-lane (AMD CDNA) warps alike.
 */
#ifndef PRM_CUDA_VENDOR_H
#define PRM_CUDA_VENDOR_H

#if defined(PRM_HIP)
/* ------------------------------------------------------------------ HIP */
#ifndef HIPBLAS_V2
#define HIPBLAS_V2
#endif
#include <hip/hip_bf16.h>
#include <hip/hip_runtime.h>
#include <hipblas/hipblas.h>

#define PRM_GPU_VENDOR "hip"
#define PRM_GPU_HAVE_LT 0 /* hipBLASLt not mapped yet: GEMMs through hipblasGemmEx */

typedef hipError_t gpuError_t;
typedef hipStream_t gpuStream_t;
typedef hipDeviceProp_t gpuDeviceProp;
typedef hipMemcpyKind gpuMemcpyKind;
typedef hipFuncAttributes gpuFuncAttributes;
typedef hip_bfloat16 gpu_bf16;
#define gpuSuccess hipSuccess
#define gpuErrorInsufficientDriver hipErrorInsufficientDriver
#define gpuErrorNoDevice hipErrorNoDevice
#define gpuErrorMemoryAllocation hipErrorOutOfMemory
#define gpuGetErrorString hipGetErrorString
#define gpuGetErrorName hipGetErrorName
#define gpuGetLastError hipGetLastError
#define gpuDriverGetVersion hipDriverGetVersion
#define gpuRuntimeGetVersion hipRuntimeGetVersion
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuFuncGetAttributes hipFuncGetAttributes
#define gpuMemGetInfo hipMemGetInfo
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMallocHost hipHostMalloc
#define gpuFreeHost hipHostFree
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamDestroy hipStreamDestroy
typedef hipEvent_t gpuEvent_t;
#define gpuEventCreate hipEventCreate
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime

typedef hipblasHandle_t gpublasHandle_t;
typedef hipblasStatus_t gpublasStatus_t;
typedef hipblasComputeType_t gpublasComputeType_t;
#define GPUBLAS_STATUS_SUCCESS HIPBLAS_STATUS_SUCCESS
#define GPUBLAS_OP_N HIPBLAS_OP_N
#define GPUBLAS_OP_T HIPBLAS_OP_T
#define GPUBLAS_R_32F HIP_R_32F
#define GPUBLAS_R_16BF HIP_R_16BF
#define GPUBLAS_COMPUTE_32F HIPBLAS_COMPUTE_32F
#define GPUBLAS_COMPUTE_32F_FAST_TF32 HIPBLAS_COMPUTE_32F_FAST_TF32
#define GPUBLAS_GEMM_DEFAULT HIPBLAS_GEMM_DEFAULT
#define gpublasCreate hipblasCreate
#define gpublasDestroy hipblasDestroy
#define gpublasSetStream hipblasSetStream
#define gpublasSetWorkspace hipblasSetWorkspace
#define gpublasSetAtomicsMode hipblasSetAtomicsMode
#define GPUBLAS_ATOMICS_NOT_ALLOWED HIPBLAS_ATOMICS_NOT_ALLOWED
#define gpublasGemmEx hipblasGemmEx
#define gpublasGemmBatchedEx hipblasGemmBatchedEx
#define gpublasGetStatusString hipblasStatusToString
/* hipBLAS has no per-handle version query: report the header's. */
#define gpublasGetVersion(h, v)                                                              \
  ((*(v) = hipblasVersionMajor * 10000 + hipblasVersionMinor * 100 + hipblasVersionPatch), \
   HIPBLAS_STATUS_SUCCESS)

/* Lane exchange within a warp; HIP's shuffles take no mask. PRM_SHFL
 * reads lane l of the 32-lane group (attention_flash.cu's mma fallback). */
#define PRM_SHFL_XOR(v, m) __shfl_xor((v), (m))
#define PRM_SHFL(v, l) __shfl((v), (l), 32)

#else
/* ----------------------------------------------------------------- CUDA */
#include <cublas_v2.h>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define PRM_GPU_VENDOR "cuda"

typedef cudaError_t gpuError_t;
typedef cudaStream_t gpuStream_t;
typedef cudaDeviceProp gpuDeviceProp;
typedef cudaMemcpyKind gpuMemcpyKind;
typedef cudaFuncAttributes gpuFuncAttributes;
typedef __nv_bfloat16 gpu_bf16;
#define gpuSuccess cudaSuccess
#define gpuErrorInsufficientDriver cudaErrorInsufficientDriver
#define gpuErrorNoDevice cudaErrorNoDevice
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuGetErrorString cudaGetErrorString
#define gpuGetErrorName cudaGetErrorName
#define gpuGetLastError cudaGetLastError
#define gpuDriverGetVersion cudaDriverGetVersion
#define gpuRuntimeGetVersion cudaRuntimeGetVersion
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuFuncGetAttributes cudaFuncGetAttributes
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMallocHost cudaMallocHost
#define gpuFreeHost cudaFreeHost
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamDestroy cudaStreamDestroy
typedef cudaEvent_t gpuEvent_t;
#define gpuEventCreate cudaEventCreate
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime

typedef cublasHandle_t gpublasHandle_t;
typedef cublasStatus_t gpublasStatus_t;
typedef cublasComputeType_t gpublasComputeType_t;
#define GPUBLAS_STATUS_SUCCESS CUBLAS_STATUS_SUCCESS
#define GPUBLAS_OP_N CUBLAS_OP_N
#define GPUBLAS_OP_T CUBLAS_OP_T
#define GPUBLAS_R_32F CUDA_R_32F
#define GPUBLAS_R_16BF CUDA_R_16BF
#define GPUBLAS_COMPUTE_32F CUBLAS_COMPUTE_32F
#define GPUBLAS_COMPUTE_32F_FAST_TF32 CUBLAS_COMPUTE_32F_FAST_TF32
#define GPUBLAS_GEMM_DEFAULT CUBLAS_GEMM_DEFAULT
#define gpublasCreate cublasCreate
#define gpublasDestroy cublasDestroy
#define gpublasSetStream cublasSetStream
#define gpublasSetWorkspace cublasSetWorkspace
#define gpublasSetAtomicsMode cublasSetAtomicsMode
#define GPUBLAS_ATOMICS_NOT_ALLOWED CUBLAS_ATOMICS_NOT_ALLOWED
#define gpublasGemmEx cublasGemmEx
#define gpublasGemmBatchedEx cublasGemmBatchedEx
#define gpublasGetStatusString cublasGetStatusString
#define gpublasGetVersion cublasGetVersion
typedef cublasOperation_t gpublasOperation_t;

/* cuBLASLt (gemm_lt.cu): an algorithm per GEMM shape. */
#define PRM_GPU_HAVE_LT 1
typedef cublasLtHandle_t gpublasLtHandle_t;
typedef cublasLtMatmulDesc_t gpublasLtMatmulDesc_t;
typedef cublasLtMatrixLayout_t gpublasLtMatrixLayout_t;
typedef cublasLtMatmulPreference_t gpublasLtMatmulPreference_t;
typedef cublasLtMatmulAlgo_t gpublasLtMatmulAlgo_t;
typedef cublasLtMatmulHeuristicResult_t gpublasLtMatmulHeuristicResult_t;
#define gpublasLtCreate cublasLtCreate
#define gpublasLtDestroy cublasLtDestroy
#define gpublasLtGetVersion cublasLtGetVersion
#define gpublasLtMatmulDescCreate cublasLtMatmulDescCreate
#define gpublasLtMatmulDescDestroy cublasLtMatmulDescDestroy
#define gpublasLtMatmulDescSetAttribute cublasLtMatmulDescSetAttribute
#define GPUBLASLT_MATMUL_DESC_TRANSA CUBLASLT_MATMUL_DESC_TRANSA
#define GPUBLASLT_MATMUL_DESC_TRANSB CUBLASLT_MATMUL_DESC_TRANSB
#define gpublasLtMatrixLayoutCreate cublasLtMatrixLayoutCreate
#define gpublasLtMatrixLayoutDestroy cublasLtMatrixLayoutDestroy
#define gpublasLtMatmulPreferenceCreate cublasLtMatmulPreferenceCreate
#define gpublasLtMatmulPreferenceDestroy cublasLtMatmulPreferenceDestroy
#define gpublasLtMatmulPreferenceSetAttribute cublasLtMatmulPreferenceSetAttribute
#define GPUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
#define GPUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES
#define GPUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES
#define GPUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES
#define GPUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES
#define gpublasLtMatmulAlgoGetHeuristic cublasLtMatmulAlgoGetHeuristic
#define gpublasLtMatmulAlgoCheck cublasLtMatmulAlgoCheck
#define gpublasLtMatmul cublasLtMatmul

/* Lane exchange within a warp; every lane of the warp takes part. */
#define PRM_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#define PRM_SHFL(v, l) __shfl_sync(0xffffffffu, (v), (l))
#endif

#endif /* PRM_CUDA_VENDOR_H */
