// Emulated-device stand-in for the toolkit's library_types.h: the data-type and library-property
// enums shared by the CUDA math libraries (cuBLASLt here). Values are the toolkit's, so code that
// stores or compares them behaves alike on both builds. (cublasComputeType_t is not here: the
// toolkit declares it in cublas_api.h, which cublasLt.h includes; see cublasLt.h.)
#pragma once

// cudaDataType_t: element type of a matrix (cuBLAS docs, "cudaDataType_t"; numeric values as in
// the toolkit's library_types.h, which the CUDA headers share with cuFFT, cuSPARSE, ...).
typedef enum cudaDataType_t {
  CUDA_R_16F = 2,
  CUDA_C_16F = 6,
  CUDA_R_16BF = 14,
  CUDA_C_16BF = 15,
  CUDA_R_32F = 0,
  CUDA_C_32F = 4,
  CUDA_R_64F = 1,
  CUDA_C_64F = 5,
  CUDA_R_8I = 3,
  CUDA_C_8I = 7,
  CUDA_R_8U = 8,
  CUDA_C_8U = 9,
  CUDA_R_32I = 10,
  CUDA_C_32I = 11,
  CUDA_R_32U = 12,
  CUDA_C_32U = 13,
  CUDA_R_8F_E4M3 = 28,
  CUDA_R_8F_E5M2 = 29,
} cudaDataType;
typedef enum cudaDataType_t cudaDataType_t;

typedef enum libraryPropertyType_t {
  MAJOR_VERSION,
  MINOR_VERSION,
  PATCH_LEVEL,
} libraryPropertyType;
typedef enum libraryPropertyType_t libraryPropertyType_t;
