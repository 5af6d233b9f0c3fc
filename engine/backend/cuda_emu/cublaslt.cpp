// cuBLASLt on the emulated device (the subset declared in include/cublasLt.h): descriptors, a
// heuristic of up to four alike algorithms, and cublasLtMatmul validated at the call and computed
// on the host, asynchronously on the stream's thread. Semantics and refusals follow NVIDIA's cuBLAS docs
// (https://docs.nvidia.com/cuda/cublas/index.html, "Using the cuBLASLt API"), cited by section.
// One file over 600 lines on purpose: the descriptors, the heuristic and the matmul validate against
// one another (every refusal is checked where the documentation places it, next to its section).
// FP8 (E4M3/E5M2 A and B on Hopper) follows 3.4.17's "When A, B, C, and D Use Layouts for FP8"
// table and its requirements, and 3.1.4.1's tensor-wide scaling; the formats' arithmetic is
// engine/core/fp8.h (round to nearest even, saturating to the largest finite value).
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/backend/cuda_emu/half.h"
#include "engine/backend/cuda_emu/stream.h"
#include "engine/core/fp8.h"

// ---- the opaque structs (defaults from 3.3.9 / 3.3.13 / 3.3.19)
struct cublasLtContext {
  int unused = 0;  // the emulated device keeps no per-handle state
};
struct cublasLtMatmulDescOpaque_t {
  int32_t compute_type = CUBLAS_COMPUTE_32F;
  int32_t scale_type = CUDA_R_32F;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int64_t bias_batch_stride = 0;
  const void* aux = nullptr;
  int64_t aux_ld = 0, aux_batch_stride = 0;
  int32_t aux_data_type = -1, bias_data_type = -1;  // -1: "unset", i.e. D's type
  const void *a_scale = nullptr, *b_scale = nullptr, *c_scale = nullptr, *d_scale = nullptr;  // NULL: 1
  void* amax_d = nullptr;
  int8_t fast_accum = 0;  // FP8's faster, less accurate accumulation: not modelled (k order in fp32 either way)
};
struct cublasLtMatrixLayoutOpaque_t {
  uint32_t type = CUDA_R_32F;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch_count = 1;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint32_t search_mode = CUBLASLT_SEARCH_BEST_FIT;
  uint64_t max_workspace_bytes = 0;
  uint32_t min_alignment[4] = {256, 256, 256, 256};  // A, B, C, D: "Default is 256 bytes"
};

namespace {

// ---- attribute storage: one (address, size) per attribute; Set/Get demand the exact size
// ("CUBLAS_STATUS_INVALID_VALUE if buf is NULL or sizeInBytes doesn't match the size of the
// internal storage for the selected attribute", 3.4.29 / 3.4.28 and their layout/preference twins)
struct Field {
  void* at = nullptr;
  size_t size = 0;
};
template <typename T>
Field field(T& v) {
  return {&v, sizeof v};
}

Field desc_field(cublasLtMatmulDescOpaque_t& d, cublasLtMatmulDescAttributes_t a) {
  switch (a) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return field(d.compute_type);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return field(d.scale_type);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return field(d.pointer_mode);
    case CUBLASLT_MATMUL_DESC_TRANSA: return field(d.transa);
    case CUBLASLT_MATMUL_DESC_TRANSB: return field(d.transb);
    case CUBLASLT_MATMUL_DESC_TRANSC: return field(d.transc);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return field(d.epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return field(d.bias);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return field(d.bias_batch_stride);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return field(d.aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return field(d.aux_ld);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: return field(d.aux_batch_stride);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return field(d.aux_data_type);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return field(d.bias_data_type);
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: return field(d.a_scale);
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: return field(d.b_scale);
    case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER: return field(d.c_scale);
    case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER: return field(d.d_scale);
    case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: return field(d.amax_d);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return field(d.fast_accum);
  }
  return {};  // an attribute this subset does not model
}

Field layout_field(cublasLtMatrixLayoutOpaque_t& l, cublasLtMatrixLayoutAttribute_t a) {
  switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return field(l.type);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return field(l.order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return field(l.rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return field(l.cols);
    case CUBLASLT_MATRIX_LAYOUT_LD: return field(l.ld);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return field(l.batch_count);
  }
  return {};
}

Field pref_field(cublasLtMatmulPreferenceOpaque_t& p, cublasLtMatmulPreferenceAttributes_t a) {
  switch (a) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return field(p.search_mode);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return field(p.max_workspace_bytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return field(p.min_alignment[0]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return field(p.min_alignment[1]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return field(p.min_alignment[2]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return field(p.min_alignment[3]);
  }
  return {};
}

cublasStatus_t set_field(Field f, const void* buf, size_t size) {
  if (!f.at || !buf || size != f.size) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(f.at, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

// "If sizeInBytes is 0: sizeWritten is the number of bytes needed" (3.4.28)
cublasStatus_t get_field(Field f, void* buf, size_t size, size_t* written) {
  if (!f.at) return CUBLAS_STATUS_INVALID_VALUE;
  if (size == 0) {
    if (!written) return CUBLAS_STATUS_INVALID_VALUE;
    *written = f.size;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!buf || size != f.size) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, f.at, size);
  if (written) *written = f.size;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- refusals. A check that fails says whether the configuration is unsupported (the heuristic
// finds no algorithm; cublasLtMatmul returns NOT_SUPPORTED) or invalid (cublasLtMatmul returns
// INVALID_VALUE: "parameters unexpectedly NULL, in conflict or in an impossible configuration").
enum class Verdict { ok, unsupported, invalid };
struct Check {
  Verdict verdict = Verdict::ok;
  const char* why = nullptr;
};
Check unsupported(const char* why) { return {Verdict::unsupported, why}; }
Check invalid(const char* why) { return {Verdict::invalid, why}; }

// 3.1.3 cuBLASLt Logging: CUBLASLT_LOG_LEVEL >= 1 logs errors, to stdout unless CUBLASLT_LOG_FILE
// is set (the emulator honours only the level: a refusal says why on stdout).
void log_error(const char* function, const char* why) {
  const char* level = std::getenv("CUBLASLT_LOG_LEVEL");
  if (level && std::atoi(level) >= 1) std::printf("[cublasLt][emulated][Error][%s] %s\n", function, why);
}

cublasStatus_t refuse(const char* function, Check c) {
  log_error(function, c.why);
  return c.verdict == Verdict::invalid ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_NOT_SUPPORTED;
}

// ---- element types
size_t element_bytes(int32_t type) {
  switch (type) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2: return 1;
    default: return 0;  // not a type the emulated algorithm reads or writes
  }
}
bool is_fp8(int32_t type) { return type == CUDA_R_8F_E4M3 || type == CUDA_R_8F_E5M2; }
zt::fp8::Format fp8_format(int32_t type) {
  return type == CUDA_R_8F_E4M3 ? zt::fp8::Format::E4M3 : zt::fp8::Format::E5M2;
}

float load(const void* base, int32_t type, int64_t index) {
  const char* p = static_cast<const char*>(base) + index * int64_t(element_bytes(type));
  if (is_fp8(type)) return zt::fp8::to_float(*reinterpret_cast<const uint8_t*>(p), fp8_format(type));
  if (type == CUDA_R_32F) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return type == CUDA_R_16BF ? zt::emu::bf16_bits_to_float(h) : zt::emu::half_bits_to_float(h);
}

// rounds to the type, to nearest even (the emulated __half/__nv_bfloat16 conversions)
void store(void* base, int32_t type, int64_t index, float v) {
  char* p = static_cast<char*>(base) + index * int64_t(element_bytes(type));
  if (type == CUDA_R_32F) {
    std::memcpy(p, &v, 4);
    return;
  }
  if (is_fp8(type)) {  // to nearest even, saturating to the largest finite value
    *reinterpret_cast<uint8_t*>(p) = zt::fp8::from_float(v, fp8_format(type));
    return;
  }
  const uint16_t h = type == CUDA_R_16BF ? zt::emu::float_to_bf16_bits(v) : zt::emu::float_to_half_bits(v);
  std::memcpy(p, &h, 2);
}

// ---- epilogues (3.3.2 cublasLtEpilogue_t)
bool epilogue_known(uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
    case CUBLASLT_EPILOGUE_BGRADA:
    case CUBLASLT_EPILOGUE_BGRADB: return true;
    default: return false;  // the ReLU family is not emulated
  }
}
// the epilogue reads the bias vector (BIAS_POINTER: "Input vector ... BIAS, ..., GELU_AUX_BIAS")
bool reads_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
// it writes a bias gradient there ("Output vector ... DGELU_BGRAD, BGRADA ... BGRADB")
bool writes_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}
bool uses_bias(uint32_t e) { return reads_bias(e) || writes_bias(e); }
bool writes_aux(uint32_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
bool reads_aux(uint32_t e) { return e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD; }
bool uses_aux(uint32_t e) { return writes_aux(e) || reads_aux(e); }
bool applies_gelu(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || writes_aux(e);
}

// "GELU (Gaussian Error Linear Unit) is approximated by: 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))"
// (3.3.2, note 5)
constexpr float kSqrt2OverPi = 0.7978845608028654f, kGeluCubic = 0.044715f;
// The docs do not say how accurately the epilogue's tanh is computed. A GPU kernel would use the
// fast instruction, tanh.approx.f32, whose maximum relative error the PTX ISA gives as 2^-10.987;
// the emulation assumes that worst case: the exact tanh off by 2^-11 relative, the sign of the
// error varying with the input's bits (deterministic). So fp32 code that needs more accuracy
// from the GELU epilogues fails here as it may on the GPU; 16-bit outputs round it away.
float epilogue_tanh(float u) {
  uint32_t b;
  std::memcpy(&b, &u, 4);
  const float err = ((b * 2654435761u) >> 31) ? 4.8828125e-4f : -4.8828125e-4f;  // +-2^-11
  return std::tanh(u) * (1.0f + err);
}
float gelu(float x) { return 0.5f * x * (1.0f + epilogue_tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x))); }
// DGELU's "GELU gradient": the derivative of that same approximation (the docs give no formula
// for it; this is the exact derivative of the documented forward)
float gelu_grad(float x) {
  const float t = epilogue_tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
}

// ---- the problem a descriptor and its layouts describe, once checked
struct Problem {
  int32_t compute_type = 0;
  int32_t a_type = 0, b_type = 0, c_type = 0, d_type = 0, bias_type = 0;
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
  uint32_t epilogue = 0;
  int64_t aux_ld = 0;
};

// The "Datatypes Supported" table of cublasLtMatmul() (3.4.17), rows with computeType
// CUBLAS_COMPUTE_32F / _PEDANTIC and scaleType CUDA_R_32F that this emulator implements:
//   Atype/Btype 16BF -> Ctype 16BF or 32F;  16F -> 16F or 32F;  32F -> 32F.
// Each row's Bias Type equals its Ctype. (The 8I and complex rows, the FAST_* compute types and
// the FP8/FP4 tables are not emulated.)
// 3.4.17 "When A, B, C, and D Use Layouts for FP8" (CUBLAS_COMPUTE_32F, CUDA_R_32F scale):
//   A x B:  E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3 (no E5M2 x E5M2 row);
//   C 16BF -> D 16BF or E4M3 (or E5M2 unless E4M3 x E4M3); C 16F -> D 16F or E4M3 (or E5M2 alike);
//   C 32F -> D 32F. C is never FP8.
// and its requirements: "The compute type must be CUBLAS_COMPUTE_32F", "The scale type must be
// CUDA_R_32F". Scales (3.1.4): "Scales are only applicable to narrow precisions matmuls. If any
// scale is set for a non-narrow precisions matmul, cuBLAS will return an error ... The one
// exception is that the C tensor is allowed to have a scale for non-narrow data types"; the
// attributes name the error CUBLAS_INVALID_VALUE; the amax of a 16- or 32-bit D is refused alike.
Check check_fp8_types(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t& a,
                      const cublasLtMatrixLayoutOpaque_t& b, const cublasLtMatrixLayoutOpaque_t& c,
                      const cublasLtMatrixLayoutOpaque_t& dl) {
  if (!is_fp8(int32_t(a.type)) || !is_fp8(int32_t(b.type)))
    return unsupported("FP8 and non-FP8 A/B (no such row in the datatypes tables)");
  if (d.compute_type != CUBLAS_COMPUTE_32F) return unsupported("FP8: \"The compute type must be CUBLAS_COMPUTE_32F\"");
  if (d.scale_type != CUDA_R_32F) return unsupported("FP8: \"The scale type must be CUDA_R_32F\"");
  if (a.type == CUDA_R_8F_E5M2 && b.type == CUDA_R_8F_E5M2) return unsupported("FP8: E5M2 x E5M2 is not in the FP8 table");
  const bool both_e4m3 = a.type == CUDA_R_8F_E4M3 && b.type == CUDA_R_8F_E4M3;
  const bool d_fp8 = is_fp8(int32_t(dl.type));
  bool row_ok = false;
  if (c.type == CUDA_R_16BF || c.type == CUDA_R_16F)
    row_ok = dl.type == c.type || dl.type == CUDA_R_8F_E4M3 || (dl.type == CUDA_R_8F_E5M2 && !both_e4m3);
  else if (c.type == CUDA_R_32F)
    row_ok = dl.type == CUDA_R_32F;
  if (!row_ok) return unsupported("FP8: Ctype/Dtype combination not in the FP8 table");
  if (!d_fp8 && (d.d_scale || d.amax_d)) return invalid("FP8: D scale or amax set for a non-FP8 D");
  return {};
}

Check check_types(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t& a,
                  const cublasLtMatrixLayoutOpaque_t& b, const cublasLtMatrixLayoutOpaque_t& c,
                  const cublasLtMatrixLayoutOpaque_t& dl) {
  if (is_fp8(int32_t(a.type)) || is_fp8(int32_t(b.type))) return check_fp8_types(d, a, b, c, dl);
  if (d.a_scale || d.b_scale || d.d_scale || d.amax_d)
    return invalid("A/B/D scale or amax set for a non-narrow-precision matmul");
  if (d.compute_type != CUBLAS_COMPUTE_32F && d.compute_type != CUBLAS_COMPUTE_32F_PEDANTIC)
    return unsupported("compute type: only CUBLAS_COMPUTE_32F(_PEDANTIC) is emulated");
  if (d.scale_type != CUDA_R_32F) return unsupported("scale type: CUBLAS_COMPUTE_32F needs CUDA_R_32F");
  if (a.type != b.type) return unsupported("Atype and Btype differ (no such row in the datatypes table)");
  // out-of-place C "must have the same data type, number of rows, number of columns" as D (3.4.17 note)
  if (c.type != dl.type) return invalid("C and D data types differ");
  const bool row_ok = (a.type == CUDA_R_32F && dl.type == CUDA_R_32F) ||
                      (a.type == CUDA_R_16F && (dl.type == CUDA_R_16F || dl.type == CUDA_R_32F)) ||
                      (a.type == CUDA_R_16BF && (dl.type == CUDA_R_16BF || dl.type == CUDA_R_32F));
  if (!row_ok) return unsupported("Atype/Btype/Ctype combination not in the datatypes table");
  return {};
}

// layouts: only column-major, unbatched matrices are emulated; ld per 3.3.19 ("greater or equal
// to CUBLASLT_MATRIX_LAYOUT_ROWS in case of CUBLASLT_ORDER_COL") and 3.4.35 ("ld >= rows").
Check check_layout(const cublasLtMatrixLayoutOpaque_t& l, bool is_c) {
  if (l.order != CUBLASLT_ORDER_COL) return unsupported("only CUBLASLT_ORDER_COL layouts are emulated");
  if (l.batch_count != 1) return unsupported("batched layouts are not emulated");
  // "Normally only values that can be expressed as int32_t are supported" (3.3.19); zero-sized
  // problems: the docs are silent, so they are refused as real cuBLASLt may refuse them
  if (l.rows == 0 || l.cols == 0) return unsupported("zero-sized matrix (m, n or k is 0)");
  if (l.rows > uint64_t(INT32_MAX) || l.cols > uint64_t(INT32_MAX)) return unsupported("dimension beyond int32_t");
  // C's ld may be 0 ("the leading dimension of C can be 0 to achieve row or column broadcast")
  if (is_c && l.ld == 0) return {};
  if (l.ld < int64_t(l.rows)) return invalid("leading dimension smaller than the number of rows");
  return {};
}

// 3.4.17, FP8: "A must be transposed and B non-transposed (The 'TN' format) on ... Hopper", and
// "All matrix dimensions must meet the optimal requirements listed in Tensor Core Usage (i.e.
// pointers and matrix dimension must support 16-byte alignment)": with TN and 1-byte A and B, k
// and lda, ldb multiples of 16, C's and D's leading dimensions 16-byte multiples; m a multiple of
// 16 (cuBLASLt's own log: "M must be divisible by 16"). Refused as unsupported (the heuristic finds
// no algorithm), as real cuBLASLt does.
Check check_fp8_layout(const Problem& p) {
  if (!p.ta || p.tb) return unsupported("FP8 on Hopper: A transposed and B not (the 'TN' format)");
  if (p.m % 16 != 0 || p.k % 16 != 0) return unsupported("FP8: m and k must be multiples of 16");
  if (p.lda % 16 != 0 || p.ldb % 16 != 0) return unsupported("FP8: lda and ldb must be multiples of 16");
  if ((p.ldc * int64_t(element_bytes(p.c_type))) % 16 != 0 || (p.ldd * int64_t(element_bytes(p.d_type))) % 16 != 0)
    return unsupported("FP8: the leading dimensions of C and D must be 16-byte multiples");
  return {};
}

Check check_epilogue(const cublasLtMatmulDescOpaque_t& d, const Problem& p) {
  if (!epilogue_known(d.epilogue)) return unsupported("epilogue not emulated (ReLU family or unknown)");
  const bool fp8 = is_fp8(p.a_type);
  // the FP8 table's epilogues are the bias and GELU ones (its footnote 6); no gradient epilogue,
  // and no GELU_AUX with an FP8 D (its aux type rules are not emulated)
  if (fp8 && (writes_bias(d.epilogue) || reads_aux(d.epilogue)))
    return unsupported("FP8: gradient epilogues (BGRAD*, DGELU*) are not in the FP8 table");
  if (fp8 && uses_aux(d.epilogue) && is_fp8(p.d_type)) return unsupported("FP8: GELU_AUX with an FP8 D is not emulated");
  if (fp8 && uses_bias(d.epilogue)) {
    // the FP8 table's Bias Type: C's type, and 16BF where D is 32F
    const int32_t want = p.d_type == CUDA_R_32F ? int32_t(CUDA_R_16BF) : p.c_type;
    const int32_t bias_type = d.bias_data_type == -1 ? (is_fp8(p.d_type) || p.d_type == CUDA_R_32F ? want : p.d_type)
                                                     : d.bias_data_type;
    if (bias_type != want) return unsupported("FP8: bias type not the FP8 table's (C's type; 16BF with a 32F D)");
    return {};
  }
  if (uses_bias(d.epilogue)) {
    // BIAS_DATA_TYPE: "If unset (or set to the default value of -1), the bias vector elements are
    // the same type as the elements of the output matrix (Dtype)"; the datatypes table gives one
    // Bias Type per row, equal to Ctype, so any other type is refused.
    const int32_t bias_type = d.bias_data_type == -1 ? p.d_type : d.bias_data_type;
    if (bias_type != p.d_type) return unsupported("bias data type differs from D's (datatypes table, Bias Type)");
  }
  if (uses_aux(d.epilogue)) {
    // EPILOGUE_AUX_DATA_TYPE: non-default values only for FP8 outputs; "If set for an unsupported
    // ... combination, calling cublasLtMatmul() will return CUBLAS_INVALID_VALUE"
    if (d.aux_data_type != -1) return invalid("EPILOGUE_AUX_DATA_TYPE set (only the default, D's type, is valid here)");
    // EPILOGUE_AUX_LD: "GELU input matrix leading dimension ... Must be divisible by 8 and be no
    // less than the number of rows in the output matrix" (applied to GELU_AUX too: it writes the
    // same matrix)
    if (d.aux_ld % 8 != 0) return invalid("EPILOGUE_AUX_LD is not divisible by 8");
    if (d.aux_ld < p.m) return invalid("EPILOGUE_AUX_LD is less than the rows of D");
  }
  return {};
}

Check resolve(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t& a,
              const cublasLtMatrixLayoutOpaque_t& b, const cublasLtMatrixLayoutOpaque_t& c,
              const cublasLtMatrixLayoutOpaque_t& dl, Problem* out) {
  if (d.pointer_mode != CUBLASLT_POINTER_MODE_HOST) return unsupported("only CUBLASLT_POINTER_MODE_HOST is emulated");
  // OP_C on real data is not documented for cuBLASLt: refused
  if ((d.transa != CUBLAS_OP_N && d.transa != CUBLAS_OP_T) || (d.transb != CUBLAS_OP_N && d.transb != CUBLAS_OP_T))
    return unsupported("TRANSA/TRANSB must be CUBLAS_OP_N or CUBLAS_OP_T");
  if (d.transc != CUBLAS_OP_N) return unsupported("TRANSC: \"Currently only CUBLAS_OP_N is supported\"");
  if (Check r = check_types(d, a, b, c, dl); r.verdict != Verdict::ok) return r;
  for (const auto* l : {&a, &b, &dl})
    if (Check r = check_layout(*l, false); r.verdict != Verdict::ok) return r;
  if (Check r = check_layout(c, true); r.verdict != Verdict::ok) return r;
  Problem p;
  p.compute_type = d.compute_type;
  p.a_type = int32_t(a.type), p.b_type = int32_t(b.type), p.c_type = int32_t(c.type), p.d_type = int32_t(dl.type);
  p.ta = d.transa == CUBLAS_OP_T, p.tb = d.transb == CUBLAS_OP_T;
  p.m = int64_t(dl.rows), p.n = int64_t(dl.cols);
  // op(A) is (m, k), op(B) is (k, n)
  const int64_t a_rows = int64_t(p.ta ? a.cols : a.rows), a_cols = int64_t(p.ta ? a.rows : a.cols);
  const int64_t b_rows = int64_t(p.tb ? b.cols : b.rows), b_cols = int64_t(p.tb ? b.rows : b.cols);
  if (a_rows != p.m || b_cols != p.n || a_cols != b_rows) return invalid("op(A), op(B) and D shapes do not agree");
  if (c.rows != dl.rows || c.cols != dl.cols) return invalid("C and D shapes differ");
  p.k = a_cols;
  p.lda = a.ld, p.ldb = b.ld, p.ldc = c.ld, p.ldd = dl.ld;
  p.epilogue = d.epilogue;
  p.aux_ld = d.aux_ld;
  p.bias_type = p.d_type;
  if (is_fp8(p.a_type)) {
    if (Check r = check_fp8_layout(p); r.verdict != Verdict::ok) return r;
    p.bias_type = p.d_type == CUDA_R_32F ? int32_t(CUDA_R_16BF) : p.c_type;
  }
  if (Check r = check_epilogue(d, p); r.verdict != Verdict::ok) return r;
  *out = p;
  return {};
}

// ---- the emulated algorithm's record in cublasLtMatmulAlgo_t: the configuration it was chosen
// for and the alignments it may assume, so cublasLtMatmul can refuse what it was not chosen for.
constexpr uint64_t kAlgoMagic = 0x3174'4c75'6d65'745aull;  // "ZtemuLt1"
struct AlgoRecord {
  uint64_t magic;
  int32_t compute_type, a_type, b_type, d_type;
  uint32_t epilogue;
  uint32_t ta, tb;
  uint32_t align_a, align_b, align_c, align_d, align_bias, align_aux;
  uint32_t variant;  // which of the heuristic's results (they all compute alike)
};
// The heuristic returns up to this many results, as cuBLASLt returns several candidates: they
// compute the same product the same way, and exist so that a caller's choice among them (timing
// each on its buffers) runs on the emulated device.
constexpr int kAlgoVariants = 4;
static_assert(sizeof(AlgoRecord) <= sizeof(cublasLtMatmulAlgo_t));

// the largest power of two dividing the address (capped: nothing assumes more than 256)
uint32_t alignment_of(const void* p) {
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  if (u == 0) return 256;
  return uint32_t(std::min<uintptr_t>(u & (~u + 1), 256));
}
bool power_of_two(uint32_t v) { return v && !(v & (v - 1)); }

// 3.3.13 MIN_ALIGNMENT_*: "Selecting a smaller value will exclude algorithms that can not work
// with matrix A, which is not as strictly aligned as the algorithms need." The emulated
// algorithm reads whole elements, so it needs at least one element's alignment, and it assumes
// everything promised (the strictest reading: a call breaking the promise is refused).
Check choose_alignments(const cublasLtMatmulPreferenceOpaque_t& pref, const cublasLtMatmulDescOpaque_t& d,
                        const Problem& p, AlgoRecord* r) {
  // FP8: "pointers ... must support 16-byte alignment" (3.4.17): a promise of less admits no algorithm
  const size_t floor = is_fp8(p.a_type) ? 16 : 1;
  const size_t need[4] = {std::max(floor, element_bytes(p.a_type)), std::max(floor, element_bytes(p.b_type)),
                          std::max(floor, element_bytes(p.c_type)), std::max(floor, element_bytes(p.d_type))};
  const size_t dd = element_bytes(p.d_type);
  for (int i = 0; i < 4; ++i)
    if (!power_of_two(pref.min_alignment[i]) || pref.min_alignment[i] < need[i])
      return unsupported("MIN_ALIGNMENT_*_BYTES below the element size (or not a power of two)");
  // (promises beyond 256 bytes count as 256: no algorithm needs more, and alignment_of caps there)
  r->align_a = std::min(pref.min_alignment[0], 256u), r->align_b = std::min(pref.min_alignment[1], 256u);
  r->align_c = std::min(pref.min_alignment[2], 256u), r->align_d = std::min(pref.min_alignment[3], 256u);
  // EPILOGUE_AUX_POINTER: "Routines that don't dereference this pointer, like
  // cublasLtMatmulAlgoGetHeuristic() depend on its value to determine expected pointer alignment."
  // The docs say it of the aux pointer only; the bias pointer is treated alike (conservative: a
  // kernel may assume the bias alignment it saw, and real kernels fault on less).
  r->align_bias = uses_bias(d.epilogue) ? alignment_of(d.bias) : 1;
  r->align_aux = uses_aux(d.epilogue) ? alignment_of(d.aux) : 1;
  if ((uses_bias(d.epilogue) && r->align_bias < dd) || (uses_aux(d.epilogue) && r->align_aux < dd))
    return unsupported("bias/aux pointer not aligned to its element size");
  return {};
}

AlgoRecord make_record(const Problem& p) {
  AlgoRecord r{};
  r.magic = kAlgoMagic;
  r.compute_type = p.compute_type, r.a_type = p.a_type, r.b_type = p.b_type, r.d_type = p.d_type;
  r.epilogue = p.epilogue;
  r.ta = p.ta, r.tb = p.tb;
  return r;
}

// 3.4.19 (cublasLtMatmulAlgoCheck, whose rule cublasLtMatmul shares): "CUBLAS_STATUS_INVALID_VALUE
// if matrix layout descriptors or operation descriptor don't match algo descriptor"
Check check_record(const AlgoRecord& r, const Problem& p) {
  if (r.magic != kAlgoMagic) return invalid("algo was not returned by cublasLtMatmulAlgoGetHeuristic");
  const AlgoRecord want = make_record(p);
  if (r.compute_type != want.compute_type || r.a_type != want.a_type || r.b_type != want.b_type ||
      r.d_type != want.d_type ||
      r.epilogue != want.epilogue || r.ta != want.ta || r.tb != want.tb)
    return invalid("algo was chosen for another operation (types, transposes or epilogue)");
  return {};
}

// ---- what a call enqueues: every value it needs, copied at the call (the descriptor may change
// and alpha/beta may go out of scope before the stream runs it)
struct Job {
  Problem p;
  float alpha = 1, beta = 0;
  const void *a = nullptr, *b = nullptr, *c = nullptr;
  void* d = nullptr;
  void* bias = nullptr;  // input vector or gradient output, by epilogue
  void* aux = nullptr;   // output (GELU_AUX*) or input (DGELU*)
  // tensor-wide scales (device floats, read when the stream runs the job; NULL: 1) and D's amax
  const float *a_scale = nullptr, *b_scale = nullptr, *c_scale = nullptr, *d_scale = nullptr;
  float* amax_d = nullptr;
};
float scale_of(const float* s) { return s ? *s : 1.0f; }

Check check_pointers(const Job& j, const AlgoRecord& r, const cublasLtMatrixLayoutOpaque_t& c,
                     const cublasLtMatrixLayoutOpaque_t& dl) {
  const uint32_t e = j.p.epilogue;
  if (!j.a || !j.b || !j.d) return invalid("A, B or D is NULL");
  // BLAS convention: with beta == 0, C is not read (and may be NULL)
  if (!j.c && j.beta != 0.0f) return invalid("C is NULL with nonzero beta");
  if (uses_bias(e) && !j.bias) return invalid("the epilogue needs CUBLASLT_MATMUL_DESC_BIAS_POINTER");
  if (uses_aux(e) && !j.aux) return invalid("the epilogue needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
  // in place means "C == D and Cdesc == Ddesc" (3.4.17 note)
  if (j.c == j.d && (c.ld != dl.ld)) return invalid("C == D with a different leading dimension");
  // an FP8 D has another type than C (the FP8 table): in place is impossible
  if (j.c && j.c == j.d && is_fp8(j.p.d_type)) return invalid("C == D with an FP8 D (C's type differs)");
  // alignment below what the algorithm was chosen for: the docs name no status (3.4.19 only says
  // the algo "will fail if e.g. buffers are not correctly aligned"); real cuBLASLt has been seen to
  // return NOT_SUPPORTED here (pytorch/pytorch PRs 92201 and 97205), so that is what the emulator
  // returns
  if (alignment_of(j.a) < r.align_a || alignment_of(j.b) < r.align_b || alignment_of(j.d) < r.align_d ||
      (j.c && alignment_of(j.c) < r.align_c))
    return unsupported("a matrix pointer is less aligned than the algorithm was chosen for");
  if ((uses_bias(e) && alignment_of(j.bias) < r.align_bias) || (uses_aux(e) && alignment_of(j.aux) < r.align_aux))
    return unsupported("the bias/aux pointer is less aligned than at the heuristic query");
  return {};
}

// 3.4.17: "The workspace pointer must be aligned to at least a multiple of 256 bytes"; the
// emulated algorithm needs no workspace (workspaceSize 0), so any size is enough. A NULL
// workspace claimed to have bytes is taken as "in conflict" (the docs do not say; conservative).
Check check_workspace(const void* workspace, size_t bytes) {
  if (workspace && reinterpret_cast<uintptr_t>(workspace) % 256 != 0) return invalid("workspace not 256-byte aligned");
  if (!workspace && bytes > 0) return invalid("workspace is NULL with a nonzero size");
  return {};
}

// ---- the computation (on the stream's thread)

// op(X) as floats, (rows, cols) column-major with ld = padded_rows (rows rounded up to the tile,
// the extra rows zero) and cols_padded columns (the extra ones zero), so tiles need no edge cases.
// X is stored (rows, cols) with ld when not transposed, (cols, rows) with ld when transposed.
struct Packed {
  std::vector<float> v;
  int64_t ld = 0;  // = padded rows
  float at(int64_t i, int64_t j) const { return v[size_t(i + j * ld)]; }
};
Packed pack_op(const void* x, int32_t type, bool trans, int64_t rows, int64_t cols, int64_t ld, int64_t row_tile,
               int64_t col_tile) {
  Packed out;
  out.ld = (rows + row_tile - 1) / row_tile * row_tile;
  const int64_t padded_cols = (cols + col_tile - 1) / col_tile * col_tile;
  out.v.assign(size_t(out.ld * padded_cols), 0.0f);
  if (!trans) {
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t i = 0; i < rows; ++i) out.v[size_t(i + j * out.ld)] = load(x, type, i + j * ld);
  } else {
    for (int64_t i = 0; i < rows; ++i)  // column i of the stored matrix is row i of op(X)
      for (int64_t j = 0; j < cols; ++j) out.v[size_t(i + j * out.ld)] = load(x, type, j + i * ld);
  }
  return out;
}

std::vector<float> load_vector(const void* v, int32_t type, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = load(v, type, i);
  return out;
}

// BGRADA / BGRADB (3.3.2): the bias gradient of op(A) (length m) or op(B) (length n), a sum over
// GEMM's k dimension of the input as given (alpha does not scale it: the docs are silent), stored
// (not accumulated) in the bias type
void bias_grad_of_input(const Job& j, const Packed& a, const Packed& b) {
  const Problem& p = j.p;
  if (p.epilogue == CUBLASLT_EPILOGUE_BGRADA) {
    for (int64_t i = 0; i < p.m; ++i) {
      float s = 0;
      for (int64_t q = 0; q < p.k; ++q) s += a.at(i, q);
      store(j.bias, p.bias_type, i, s);
    }
  } else if (p.epilogue == CUBLASLT_EPILOGUE_BGRADB) {
    for (int64_t c = 0; c < p.n; ++c) {
      float s = 0;
      for (int64_t q = 0; q < p.k; ++q) s += b.at(q, c);
      store(j.bias, p.bias_type, c, s);
    }
  }
}

// The epilogue of one element (i, c) of D, given acc = (op(A) op(B))[i, c]:
// v = alpha acc + beta C, then bias / GELU / GELU gradient as the epilogue says (3.3.2: the bias
// is "added before applying the final postprocessing"). Returns v as stored in D (before rounding).
// With tensor-wide scales (3.1.4.1): D = scale_D Epilogue(alpha scale_A scale_B op(A) op(B) +
// beta scale_C C + bias), the amax of D taken after the epilogue and before scale_D.
float finish(const Job& j, const std::vector<float>& bias, int64_t i, int64_t c, float acc, float* amax) {
  const Problem& p = j.p;
  float v = j.alpha * scale_of(j.a_scale) * scale_of(j.b_scale) * acc;
  if (j.beta != 0.0f) v += j.beta * scale_of(j.c_scale) * load(j.c, p.c_type, i + c * p.ldc);
  if (reads_bias(p.epilogue)) v += bias[size_t(i)];
  if (writes_aux(p.epilogue)) store(j.aux, p.d_type, i + c * p.aux_ld, v);  // the GELU input, D's type
  if (applies_gelu(p.epilogue)) v = gelu(v);
  if (reads_aux(p.epilogue)) v *= gelu_grad(load(j.aux, p.d_type, i + c * p.aux_ld));
  *amax = std::max(*amax, std::fabs(v));
  store(j.d, p.d_type, i + c * p.ldd, j.d_scale ? v * *j.d_scale : v);
  return v;
}

// One (8, 4) tile of op(A) op(B): rows i0.. of op(A) (packed, ld = lda), columns c0.. of op(B)
// (packed, ld = ldb). The accumulators stay in registers over the whole k loop; each element
// sums its k products in k order.
constexpr int64_t kTileRows = 8, kTileCols = 4;
struct Tile {
  float v[kTileCols][kTileRows];
};
Tile tile_product(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k) {
  Tile t{};
  for (int64_t q = 0; q < k; ++q) {
    const float* a_q = a + q * lda;  // (8) column q of the op(A) rows
    for (int64_t c = 0; c < kTileCols; ++c) {
      const float b_qc = b[q + c * ldb];
      for (int64_t r = 0; r < kTileRows; ++r) t.v[c][r] += a_q[r] * b_qc;
    }
  }
  return t;
}

// D = epilogue(alpha op(A) op(B) + beta C). Each element accumulates its k products in float in k
// order (the hardware's summation order is unspecified; CUBLAS_COMPUTE_32F only promises fp32
// accumulation), in (8, 4) register tiles over zero-padded packed copies of op(A) and op(B).
void run_gemm(const Job& j) {
  const Problem& p = j.p;
  const Packed a = pack_op(j.a, p.a_type, p.ta, p.m, p.k, p.lda, kTileRows, 1);  // (m, k), padded rows
  const Packed b = pack_op(j.b, p.b_type, p.tb, p.k, p.n, p.ldb, 1, kTileCols);  // (k, n), padded cols
  bias_grad_of_input(j, a, b);
  const std::vector<float> bias = reads_bias(p.epilogue) ? load_vector(j.bias, p.bias_type, p.m) : std::vector<float>();
  std::vector<float> dbias(p.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD ? size_t(p.m) : 0, 0.0f);
  float amax = 0.0f;
  for (int64_t c0 = 0; c0 < p.n; c0 += kTileCols) {
    const int64_t nc = std::min(kTileCols, p.n - c0);
    for (int64_t i0 = 0; i0 < p.m; i0 += kTileRows) {
      const int64_t ni = std::min(kTileRows, p.m - i0);
      const Tile t = tile_product(&a.v[size_t(i0)], a.ld, &b.v[size_t(c0 * b.ld)], b.ld, p.k);
      // columns in order for each row, so DGELU_BGRAD's sum over n runs in column order too
      for (int64_t c = 0; c < nc; ++c)
        for (int64_t i = 0; i < ni; ++i) {
          const float v = finish(j, bias, i0 + i, c0 + c, t.v[c][i], &amax);
          if (!dbias.empty()) dbias[size_t(i0 + i)] += v;
        }
    }
  }
  // DGELU_BGRAD: "Store GELU gradient in the output matrix, and Bias gradient in the bias buffer":
  // the sum over D's columns of the GELU gradient (length m, the rows of D)
  for (size_t i = 0; i < dbias.size(); ++i) store(j.bias, p.bias_type, int64_t(i), dbias[i]);
  if (j.amax_d) *j.amax_d = amax;  // "on completion will be set to the maximum of absolute values"
}

// ZTRAIN_EMU_CUBLASLT_DUMP=FILE (tests/cuda_emu/fp8_descriptors.py): every accepted
// cublasLtMatmul's descriptors, as their attributes read, appended to FILE as one JSON line each,
// so that a test can hold a caller's descriptors against the documentation's rules on its own.
const char* type_name(int64_t t) {
  switch (t) {
    case CUDA_R_32F: return "FP32";
    case CUDA_R_16F: return "FP16";
    case CUDA_R_16BF: return "BF16";
    case CUDA_R_8F_E4M3: return "E4M3";
    case CUDA_R_8F_E5M2: return "E5M2";
    default: return "other";
  }
}
void dump_matmul(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t* const (&l)[4],
                 const void* const (&ptr)[4], float alpha, float beta) {
  static const char* path = std::getenv("ZTRAIN_EMU_CUBLASLT_DUMP");
  if (!path || !*path) return;
  std::string line = "{\"compute\": \"" + std::string(d.compute_type == CUBLAS_COMPUTE_32F ? "32F" : "other") +
                     "\", \"scale_type\": \"" + type_name(d.scale_type) + "\", \"transa\": \"" +
                     (d.transa == CUBLAS_OP_T ? "T" : "N") + "\", \"transb\": \"" + (d.transb == CUBLAS_OP_T ? "T" : "N") +
                     "\", \"epilogue\": " + std::to_string(d.epilogue) + ", \"bias_type\": \"" +
                     (d.bias_data_type < 0 ? "unset" : type_name(d.bias_data_type)) +
                     "\", \"a_scale\": " + (d.a_scale ? "true" : "false") + ", \"b_scale\": " +
                     (d.b_scale ? "true" : "false") + ", \"fast_accum\": " + (d.fast_accum ? "true" : "false") +
                     ", \"alpha\": " + std::to_string(alpha) +
                     ", \"beta\": " + std::to_string(beta);
  const char* names[4] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; ++i)
    line += ", \"" + std::string(names[i]) + "\": {\"type\": \"" + type_name(l[i]->type) + "\", \"rows\": " +
            std::to_string(l[i]->rows) + ", \"cols\": " + std::to_string(l[i]->cols) + ", \"ld\": " +
            std::to_string(l[i]->ld) + ", \"order\": \"" + (l[i]->order == CUBLASLT_ORDER_COL ? "col" : "other") +
            "\", \"align\": " + std::to_string(alignment_of(ptr[i])) + "}";
  line += "}\n";
  if (FILE* f = std::fopen(path, "a")) {
    std::fputs(line.c_str(), f);
    std::fclose(f);
  }
}

const cublasLtMatrixLayoutOpaque_t& c_layout(cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d) {
  return c ? *c : *d;  // "If Cdesc is omitted, this function assumes it to be equal to Ddesc" (3.4.17)
}

// the heuristic's own search, shared with cublasLtMatmul's implicit query (algo == NULL)
Check find_algorithm(const cublasLtMatmulDescOpaque_t& d, const cublasLtMatrixLayoutOpaque_t& a,
                     const cublasLtMatrixLayoutOpaque_t& b, const cublasLtMatrixLayoutOpaque_t& c,
                     const cublasLtMatrixLayoutOpaque_t& dl, const cublasLtMatmulPreferenceOpaque_t& pref,
                     AlgoRecord* out) {
  Problem p;
  if (Check r = resolve(d, a, b, c, dl, &p); r.verdict != Verdict::ok) return r;
  // LIMITED_BY_ALGO_ID needs an algo from cublasLtMatmulAlgoInit(), which is not emulated
  if (pref.search_mode != CUBLASLT_SEARCH_BEST_FIT) return unsupported("only CUBLASLT_SEARCH_BEST_FIT is emulated");
  AlgoRecord r = make_record(p);
  if (Check ch = choose_alignments(pref, d, p, &r); ch.verdict != Verdict::ok) return ch;
  *out = r;  // needs no workspace, so any MAX_WORKSPACE_BYTES (default 0) admits it
  return {};
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}

// 3.4.2: "the release of those resources by calling cublasLtDestroy() will implicitly call
// cudaDeviceSynchronize()"
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
  cudaDeviceSynchronize();
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

// descriptions in the words of the cublasStatus_t table (cuBLAS Datatypes Reference)
const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the cuBLAS library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "resource allocation failed inside the cuBLAS library";
    case CUBLAS_STATUS_INVALID_VALUE: return "an unsupported value or parameter was passed to the function";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "the function requires a feature absent from the device architecture";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal cuBLAS operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "the functionality requested requires some license";
  }
  return "unknown cuBLAS status";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  auto* d = new cublasLtMatmulDescOpaque_t();
  d->compute_type = computeType;
  d->scale_type = scaleType;
  *matmulDesc = d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  delete matmulDesc;  // enqueued work holds copies, never the descriptor
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  return set_field(desc_field(*matmulDesc, attr), buf, sizeInBytes);
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              void* buf, size_t sizeInBytes, size_t* sizeWritten) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  return get_field(desc_field(*matmulDesc, attr), buf, sizeInBytes, sizeWritten);
}

// 3.4.35: the values are checked where they are used (heuristic, matmul), as the docs list only
// ALLOC_FAILED among this function's failures
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
  auto* l = new cublasLtMatrixLayoutOpaque_t();
  l->type = uint32_t(type), l->rows = rows, l->cols = cols, l->ld = ld;
  *matLayout = l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  delete matLayout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
  return set_field(layout_field(*matLayout, attr), buf, sizeInBytes);
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                void* buf, size_t sizeInBytes, size_t* sizeWritten) {
  if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
  return get_field(layout_field(*matLayout, attr), buf, sizeInBytes, sizeWritten);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new cublasLtMatmulPreferenceOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  return set_field(pref_field(*pref, attr), buf, sizeInBytes);
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                    size_t sizeInBytes, size_t* sizeWritten) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  return get_field(pref_field(*pref, attr), buf, sizeInBytes, sizeWritten);
}

// 3.4.22. Returns: INVALID_VALUE "if requestedAlgoCount is less or equal to zero", NOT_SUPPORTED
// "if no heuristic function is available for current configuration" (with *returnAlgoCount 0:
// every refusal of the configuration lands here), else up to kAlgoVariants results.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount || !operationDesc || !Adesc ||
      !Bdesc || !Ddesc || !preference)
    return CUBLAS_STATUS_INVALID_VALUE;
  *returnAlgoCount = 0;
  AlgoRecord r;
  if (Check ch = find_algorithm(*operationDesc, *Adesc, *Bdesc, c_layout(Cdesc, Ddesc), *Ddesc, *preference, &r);
      ch.verdict != Verdict::ok) {
    log_error("cublasLtMatmulAlgoGetHeuristic", ch.why);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const int n = std::min(requestedAlgoCount, kAlgoVariants);
  for (int i = 0; i < n; ++i) {
    cublasLtMatmulHeuristicResult_t& out = heuristicResultsArray[i];
    out = cublasLtMatmulHeuristicResult_t{};
    r.variant = uint32_t(i);
    std::memcpy(&out.algo, &r, sizeof r);
    out.workspaceSize = 0;
    out.state = CUBLAS_STATUS_SUCCESS;
    out.wavesCount = 1.0f;  // no device to fill: reported as exactly one wave
  }
  *returnAlgoCount = n;
  return CUBLAS_STATUS_SUCCESS;
}

// 3.4.17. Everything is checked before anything is enqueued, so a refused call changes nothing.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                              cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes,
                              cudaStream_t stream) {
  static constexpr const char* kFn = "cublasLtMatmul";
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!computeDesc || !Adesc || !Bdesc || !Ddesc || !alpha || !beta)
    return refuse(kFn, invalid("a descriptor or alpha/beta is NULL"));
  const cublasLtMatmulDescOpaque_t& d = *computeDesc;
  const cublasLtMatrixLayoutOpaque_t& cl = c_layout(Cdesc, Ddesc);
  Job j;
  if (Check ch = resolve(d, *Adesc, *Bdesc, cl, *Ddesc, &j.p); ch.verdict != Verdict::ok) return refuse(kFn, ch);
  AlgoRecord r;
  if (algo) {
    std::memcpy(&r, algo, sizeof r);
  } else {
    // "When NULL, an implicit heuristics query with default search preferences will be performed"
    const cublasLtMatmulPreferenceOpaque_t defaults;
    if (Check ch = find_algorithm(d, *Adesc, *Bdesc, cl, *Ddesc, defaults, &r); ch.verdict != Verdict::ok)
      return refuse(kFn, unsupported(ch.why));
  }
  if (Check ch = check_record(r, j.p); ch.verdict != Verdict::ok) return refuse(kFn, ch);
  // A planted fault (tests): ZTRAIN_EMU_CUBLASLT_FAIL_VARIANT=N makes the heuristic's result N fail
  // at every call, as a real algorithm the heuristic offered may fail at run time (3.4.19: "will
  // fail if e.g. buffers are not correctly aligned"), before anything is enqueued.
  static const int failing = [] {
    const char* v = std::getenv("ZTRAIN_EMU_CUBLASLT_FAIL_VARIANT");
    return v && *v ? std::atoi(v) : -1;
  }();
  if (algo && int(r.variant) == failing)
    return refuse(kFn, unsupported("this heuristic result fails at run time (ZTRAIN_EMU_CUBLASLT_FAIL_VARIANT, a "
                                   "planted fault)"));
  // CUBLASLT_POINTER_MODE_HOST: alpha and beta are host scalars of the scale type, read now
  std::memcpy(&j.alpha, alpha, sizeof(float));
  std::memcpy(&j.beta, beta, sizeof(float));
  j.a = A, j.b = B, j.c = C, j.d = D;
  j.bias = const_cast<void*>(d.bias);
  j.aux = const_cast<void*>(d.aux);
  j.a_scale = static_cast<const float*>(d.a_scale), j.b_scale = static_cast<const float*>(d.b_scale);
  j.c_scale = static_cast<const float*>(d.c_scale), j.d_scale = static_cast<const float*>(d.d_scale);
  j.amax_d = static_cast<float*>(d.amax_d);
  if (Check ch = check_pointers(j, r, cl, *Ddesc); ch.verdict != Verdict::ok) return refuse(kFn, ch);
  if (Check ch = check_workspace(workspace, workspaceSizeInBytes); ch.verdict != Verdict::ok) return refuse(kFn, ch);
  dump_matmul(d, {Adesc, Bdesc, &cl, Ddesc}, {A, B, C ? C : D, D}, j.alpha, j.beta);
  zt::emu::stream_enqueue(stream, kFn, [j] { run_gemm(j); });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
