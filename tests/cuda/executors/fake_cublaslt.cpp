#include "fake_cublaslt.h"

#include <cublasLt.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>

#include "backend/cuda/calls/gemm_interpreter.h"

namespace vitpipe::fake_cublaslt {
namespace {

struct Desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;
  int32_t bias_type = -1;  // -1: D's type
};
struct Layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;
};
struct Preference {
  uint64_t workspace = 0;
};

// The handles' state, shared by every thread (the tests' ranks are threads, each with its backends): every access
// holds maps_mutex (std::map's nodes stay put, but its tree changes on insert and erase).
std::mutex maps_mutex;
std::map<const void*, Desc> descs;
std::map<const void*, Layout> layouts;
std::map<const void*, Preference> preferences;
std::string error;

cublasStatus_t invalid(const std::string& why) {
  error = why;
  return CUBLAS_STATUS_INVALID_VALUE;
}

template <class T>
cublasStatus_t read(T& out, const void* buf, size_t size, const char* name) {
  if (size != sizeof(T)) return invalid(std::string(name) + ": " + std::to_string(size) + " bytes given");
  std::memcpy(&out, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

bool element_type(cudaDataType_t t, cuda::ElementType* out) {
  if (t == CUDA_R_32F)
    *out = cuda::ElementType::f32;
  else if (t == CUDA_R_16BF)
    *out = cuda::ElementType::bf16;
  else
    return false;
  return true;
}

}  // namespace

Counters& counters() {
  static Counters c;
  return c;
}
Behaviour& behaviour() {
  static Behaviour b;
  return b;
}
const std::string& last_error() { return error; }

}  // namespace vitpipe::fake_cublaslt

using namespace vitpipe::fake_cublaslt;
using vitpipe::cuda::ElementType;

extern "C" {

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
  std::lock_guard<std::mutex> lock(maps_mutex);
  *d = new cublasLtMatmulDescOpaque_t{};
  descs[*d] = Desc{compute, scale};
  ++counters().descriptors_created;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  std::lock_guard<std::mutex> lock(maps_mutex);
  descs.erase(d);
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  std::lock_guard<std::mutex> lock(maps_mutex);
  Desc& desc = descs.at(d);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return read(desc.trans_a, buf, size, "TRANSA (int32_t)");
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return read(desc.trans_b, buf, size, "TRANSB (int32_t)");
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return read(desc.epilogue, buf, size, "EPILOGUE (uint32_t)");
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return read(desc.bias, buf, size, "BIAS_POINTER (void*)");
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return read(desc.bias_type, buf, size, "BIAS_DATA_TYPE (int32_t)");
    default:
      return invalid("matmul attribute " + std::to_string(attr) + " is not one the fake knows");
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  std::lock_guard<std::mutex> lock(maps_mutex);
  *l = new cublasLtMatrixLayoutOpaque_t{};
  layouts[*l] = Layout{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  std::lock_guard<std::mutex> lock(maps_mutex);
  layouts.erase(l);
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  std::lock_guard<std::mutex> lock(maps_mutex);
  Layout& layout = layouts.at(l);
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return read(layout.batch_count, buf, size, "BATCH_COUNT (int32_t)");
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return read(layout.batch_stride, buf, size, "STRIDED_BATCH_OFFSET (int64_t)");
    default:
      return invalid("layout attribute " + std::to_string(attr) + " is not one the fake knows");
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  std::lock_guard<std::mutex> lock(maps_mutex);
  *p = new cublasLtMatmulPreferenceOpaque_t{};
  preferences[*p] = Preference{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  std::lock_guard<std::mutex> lock(maps_mutex);
  preferences.erase(p);
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  std::lock_guard<std::mutex> lock(maps_mutex);
  uint32_t alignment = 0;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return read(preferences.at(p).workspace, buf, size, "MAX_WORKSPACE_BYTES (uint64_t)");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return read(alignment, buf, size, "MIN_ALIGNMENT_*_BYTES (uint32_t)");
    default:
      return invalid("preference attribute " + std::to_string(attr) + " is not one the fake knows");
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* count) {
  std::lock_guard<std::mutex> lock(maps_mutex);
  ++counters().heuristic_queries;
  if (!descs.count(d) || !layouts.count(a) || !layouts.count(b) || !layouts.count(c) || !layouts.count(dl) ||
      !preferences.count(p) || requested < 1) {
    return invalid("heuristic query with an unknown descriptor");
  }
  if (requested > counters().largest_request) counters().largest_request = requested;
  const int offered = std::min(requested, behaviour().algorithms_offered);
  for (int i = 0; i < offered; ++i) {
    results[i] = cublasLtMatmulHeuristicResult_t{};
    results[i].algo.data[0] = static_cast<uint64_t>(i);
    results[i].workspaceSize = 0;
    results[i].state = CUBLAS_STATUS_SUCCESS;
  }
  *count = offered;
  return CUBLAS_STATUS_SUCCESS;
}

// Rebuilds the call from what the executor told cuBLASLt, and runs it with the documented semantics.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha, const void* a,
                              cublasLtMatrixLayout_t al, const void* b, cublasLtMatrixLayout_t bl, const void* beta,
                              const void* c, cublasLtMatrixLayout_t cl, void* dd, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t) {
  std::lock_guard<std::mutex> lock(maps_mutex);
  ++counters().matmuls;
  const Desc& desc = descs.at(d);
  if (algo == nullptr) return invalid("no algorithm");
  if (behaviour().failing_matmuls > 0) {
    --behaviour().failing_matmuls;
    error = "a failure the test asked for";
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  if (static_cast<int64_t>(algo->data[0]) == behaviour().refused_algorithm) {
    error = "algorithm " + std::to_string(algo->data[0]) + " refused, as the test asked";
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (desc.scale != CUDA_R_32F) return invalid("scale type is not CUDA_R_32F");
  vitpipe::cuda::GemmCall call;
  call.what = "fake cublasLtMatmul";
  vitpipe::cuda::GemmShape& s = call.shape;
  s.trans_a = desc.trans_a == CUBLAS_OP_N ? vitpipe::cuda::Transpose::none : vitpipe::cuda::Transpose::transpose;
  s.trans_b = desc.trans_b == CUBLAS_OP_N ? vitpipe::cuda::Transpose::none : vitpipe::cuda::Transpose::transpose;
  const auto convert = [](const Layout& l, vitpipe::cuda::MatrixLayout* out) {
    out->rows = static_cast<int64_t>(l.rows), out->cols = static_cast<int64_t>(l.cols), out->ld = l.ld;
    out->batch_count = l.batch_count, out->batch_stride = l.batch_stride;
    return element_type(l.type, &out->type);
  };
  if (!convert(layouts.at(al), &s.a) || !convert(layouts.at(bl), &s.b) || !convert(layouts.at(cl), &s.c) ||
      !convert(layouts.at(dl), &s.d)) {
    return invalid("a layout of a type other than f32 or bf16");
  }
  // m, n, k as cuBLASLt derives them: D is m x n, op(A) is m x k.
  s.m = s.d.rows, s.n = s.d.cols;
  s.k = desc.trans_a == CUBLAS_OP_N ? s.a.cols : s.a.rows;
  s.allow_tf32 = desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  if (desc.compute != CUBLAS_COMPUTE_32F && !s.allow_tf32) return invalid("compute type is not 32F");
  std::memcpy(&s.alpha, alpha, sizeof(float));
  std::memcpy(&s.beta, beta, sizeof(float));
  switch (desc.epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
      s.epilogue = vitpipe::cuda::GemmEpilogue::none;
      break;
    case CUBLASLT_EPILOGUE_BIAS:
      s.epilogue = vitpipe::cuda::GemmEpilogue::bias;
      break;
    case CUBLASLT_EPILOGUE_BGRADB:
      s.epilogue = vitpipe::cuda::GemmEpilogue::bias_gradient_b;
      break;
    default:
      return invalid("an epilogue the fake does not run");
  }
  if (desc.bias_type == -1) {
    s.bias_type = s.d.type;
  } else if (!element_type(static_cast<cudaDataType_t>(desc.bias_type), &s.bias_type)) {
    return invalid("a bias type other than f32 or bf16");
  }
  call.data = {a, b, c, dd, desc.bias};
  try {
    vitpipe::cuda::interpret_gemm(call);
  } catch (const std::exception& e) {
    return invalid(e.what());
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
