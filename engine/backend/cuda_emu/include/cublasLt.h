// Emulated-device stand-in for the toolkit's cublasLt.h: the cuBLASLt subset the CUDA backend
// uses (handles, descriptors, heuristics, cublasLtMatmul with its bias/GELU/bias-gradient
// epilogues), implemented on the host in engine/backend/cuda_emu/cublaslt.cpp.
//
// Written from NVIDIA's cuBLAS documentation, "Using the cuBLASLt API"
// (https://docs.nvidia.com/cuda/cublas/index.html#using-the-cublaslt-api): section names are
// cited per declaration. Enum values are the toolkit's (checked against its cublasLt.h and
// cublas_api.h), so values stored in configs or caches mean the same on both builds. Anything
// this subset does not model is left out rather than accepted and ignored.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>
#include <library_types.h>

// ---- cuBLAS datatypes (the toolkit declares these in cublas_api.h; cuBLAS docs "cuBLAS
// Datatypes Reference": cublasStatus_t, cublasOperation_t, cublasPointerMode_t,
// cublasComputeType_t)
typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16,
} cublasStatus_t;

typedef enum {
  CUBLAS_OP_N = 0,
  CUBLAS_OP_T = 1,
  CUBLAS_OP_C = 2,
} cublasOperation_t;

typedef enum {
  CUBLAS_POINTER_MODE_HOST = 0,
  CUBLAS_POINTER_MODE_DEVICE = 1,
} cublasPointerMode_t;

typedef enum {
  CUBLAS_COMPUTE_16F = 64,
  CUBLAS_COMPUTE_16F_PEDANTIC = 65,
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_PEDANTIC = 69,
  CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
  CUBLAS_COMPUTE_64F = 70,
  CUBLAS_COMPUTE_64F_PEDANTIC = 71,
  CUBLAS_COMPUTE_32I = 72,
  CUBLAS_COMPUTE_32I_PEDANTIC = 73,
} cublasComputeType_t;

// ---- opaque handles (docs 3.3.3 cublasLtHandle_t, 3.3.8 cublasLtMatmulDesc_t, 3.3.12
// cublasLtMatmulPreference_t, 3.3.18 cublasLtMatrixLayout_t). The structs are defined in
// cublaslt.cpp; only the *Create functions make them (no *Init on caller storage here).
struct cublasLtContext;
struct cublasLtMatmulDescOpaque_t;
struct cublasLtMatrixLayoutOpaque_t;
struct cublasLtMatmulPreferenceOpaque_t;
typedef cublasLtContext* cublasLtHandle_t;
typedef cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
typedef cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
typedef cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;

// 3.3.5 cublasLtMatmulAlgo_t: "an opaque structure ... can be trivially serialized and later
// restored": 64 bytes, as in the toolkit, so callers can store it by value.
typedef struct {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;

// 3.3.10 cublasLtMatmulHeuristicResult_t
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;  // actual workspace required by algo
  cublasStatus_t state;  // the other fields are valid only when this is CUBLAS_STATUS_SUCCESS
  float wavesCount;      // device utilization metric; 1.0f means the kernel fills the GPU
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

// 3.3.2 cublasLtEpilogue_t (set as CUBLASLT_MATMUL_DESC_EPILOGUE, a uint32_t). The ReLU family is
// declared for completeness of the enum; the emulation refuses it (no algorithm is returned).
typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_RELU = 2,
  CUBLASLT_EPILOGUE_RELU_AUX = CUBLASLT_EPILOGUE_RELU | 128,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_RELU_BIAS = CUBLASLT_EPILOGUE_RELU | CUBLASLT_EPILOGUE_BIAS,
  CUBLASLT_EPILOGUE_RELU_AUX_BIAS = CUBLASLT_EPILOGUE_RELU_AUX | CUBLASLT_EPILOGUE_BIAS,
  CUBLASLT_EPILOGUE_DRELU = 8 | 128,
  CUBLASLT_EPILOGUE_DRELU_BGRAD = CUBLASLT_EPILOGUE_DRELU | 16,
  CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_AUX = CUBLASLT_EPILOGUE_GELU | 128,
  CUBLASLT_EPILOGUE_GELU_BIAS = CUBLASLT_EPILOGUE_GELU | CUBLASLT_EPILOGUE_BIAS,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = CUBLASLT_EPILOGUE_GELU_AUX | CUBLASLT_EPILOGUE_BIAS,
  CUBLASLT_EPILOGUE_DGELU = 64 | 128,
  CUBLASLT_EPILOGUE_DGELU_BGRAD = CUBLASLT_EPILOGUE_DGELU | 16,
  CUBLASLT_EPILOGUE_BGRADA = 256,
  CUBLASLT_EPILOGUE_BGRADB = 512,
} cublasLtEpilogue_t;

// 3.3.24 cublasLtPointerMode_t (only HOST is emulated: alpha and beta are read at call time)
typedef enum {
  CUBLASLT_POINTER_MODE_HOST = CUBLAS_POINTER_MODE_HOST,
  CUBLASLT_POINTER_MODE_DEVICE = CUBLAS_POINTER_MODE_DEVICE,
  CUBLASLT_POINTER_MODE_DEVICE_VECTOR = 2,
  CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO = 3,
  CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST = 4,
} cublasLtPointerMode_t;

// 3.3.23 cublasLtOrder_t (only COL is emulated)
typedef enum {
  CUBLASLT_ORDER_COL = 0,
  CUBLASLT_ORDER_ROW = 1,
} cublasLtOrder_t;

// 3.3.9 cublasLtMatmulDescAttributes_t: the attributes this subset models. The comment gives the
// attribute's storage type; Set/GetAttribute require sizeInBytes to equal its size.
typedef enum {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,           // int32_t (cublasComputeType_t)
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,             // int32_t (cudaDataType_t)
  CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,           // int32_t (cublasLtPointerMode_t)
  CUBLASLT_MATMUL_DESC_TRANSA = 3,                 // int32_t (cublasOperation_t)
  CUBLASLT_MATMUL_DESC_TRANSB = 4,                 // int32_t
  CUBLASLT_MATMUL_DESC_TRANSC = 5,                 // int32_t, only CUBLAS_OP_N supported
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,               // uint32_t (cublasLtEpilogue_t)
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,           // void* / const void*
  CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,     // int64_t
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,  // void* / const void*
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,       // int64_t
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13,  // int64_t
  CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17,            // const void* (device float), NULL = 1
  CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18,            // const void* (device float), NULL = 1
  CUBLASLT_MATMUL_DESC_C_SCALE_POINTER = 19,            // const void* (device float), NULL = 1
  CUBLASLT_MATMUL_DESC_D_SCALE_POINTER = 20,            // const void* (device float), NULL = 1
  CUBLASLT_MATMUL_DESC_AMAX_D_POINTER = 21,             // void* (device float), NULL = not computed
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22,     // int32_t (cudaDataType_t), -1 = default
  CUBLASLT_MATMUL_DESC_FAST_ACCUM = 25,                 // int8_t, 0 = off
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,             // int32_t (cudaDataType_t), -1 = default
} cublasLtMatmulDescAttributes_t;

// 3.3.19 cublasLtMatrixLayoutAttribute_t (subset)
typedef enum {
  CUBLASLT_MATRIX_LAYOUT_TYPE = 0,         // uint32_t (cudaDataType_t)
  CUBLASLT_MATRIX_LAYOUT_ORDER = 1,        // int32_t (cublasLtOrder_t), only COL supported
  CUBLASLT_MATRIX_LAYOUT_ROWS = 2,         // uint64_t
  CUBLASLT_MATRIX_LAYOUT_COLS = 3,         // uint64_t
  CUBLASLT_MATRIX_LAYOUT_LD = 4,           // int64_t
  CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,  // int32_t, only 1 supported
} cublasLtMatrixLayoutAttribute_t;

// 3.3.14 cublasLtMatmulSearch_t
typedef enum {
  CUBLASLT_SEARCH_BEST_FIT = 0,
  CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID = 1,
} cublasLtMatmulSearch_t;

// 3.3.13 cublasLtMatmulPreferenceAttributes_t (subset)
typedef enum {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,            // uint32_t, default BEST_FIT
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,    // uint64_t, default 0
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,  // uint32_t, default 256
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,  // uint32_t, default 256
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,  // uint32_t, default 256
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,  // uint32_t, default 256
} cublasLtMatmulPreferenceAttributes_t;

extern "C" {

// 3.4.1 / 3.4.2
cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle);
// 3.4.6 / 3.4.7
const char* cublasLtGetStatusName(cublasStatus_t status);
const char* cublasLtGetStatusString(cublasStatus_t status);

// 3.4.25, 3.4.27 - 3.4.29
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes);
cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              void* buf, size_t sizeInBytes, size_t* sizeWritten);

// 3.4.35, 3.4.39 - 3.4.41
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes);
cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                void* buf, size_t sizeInBytes, size_t* sizeWritten);

// 3.4.30, 3.4.32 - 3.4.34
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes);
cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                    size_t sizeInBytes, size_t* sizeWritten);

// 3.4.22: at most one result (the emulator has one algorithm), workspaceSize 0.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount);

// 3.4.17: validates now, computes later on `stream` (D = alpha op(A) op(B) + beta C, then the
// epilogue).
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                              cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes,
                              cudaStream_t stream);

}  // extern "C"
