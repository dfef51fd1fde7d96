#include "backend/cuda/gemm_executor.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/calls/gemm_rules.h"

namespace vitpipe::cuda {
namespace {

// cublasGetStatusName lives in libcublas, which the module does not link (cuBLASLt only).
std::string status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    default:
      return "cublasStatus_t " + std::to_string(static_cast<int>(status));
  }
}

void check(cublasStatus_t status, const GemmCall& call, const char* step) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(describe(call) + ": " + step + " failed: " + status_name(status));
}

cudaDataType_t data_type(ElementType type) { return type == ElementType::f32 ? CUDA_R_32F : CUDA_R_16BF; }

cublasOperation_t operation(Transpose t) { return t == Transpose::none ? CUBLAS_OP_N : CUBLAS_OP_T; }

cublasLtEpilogue_t epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::bias_gradient_b:
      return CUBLASLT_EPILOGUE_BGRADB;
    case GemmEpilogue::none:
      break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value,
              const GemmCall& call) {
  check(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value), call, "cublasLtMatmulDescSetAttribute");
}

}  // namespace

// The descriptors of one shape, and the algorithms the heuristic offered for it, best first; one that cuBLASLt
// refuses at run time is dropped, so later calls start with the first that ran.
struct GemmExecutor::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;

  ~Plan() {
    for (cublasLtMatrixLayout_t l : {a, b, c, d}) {
      if (l != nullptr) cublasLtMatrixLayoutDestroy(l);
    }
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

GemmExecutor::GemmExecutor(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes)
    : handle_(handle), workspace_(workspace), workspace_bytes_(workspace_bytes) {}

GemmExecutor::~GemmExecutor() = default;

GemmExecutor::Plan& GemmExecutor::plan_for(const GemmCall& call) {
  const auto found = plans_.find(call.shape);
  if (found != plans_.end()) return *found->second;
  const GemmShape& s = call.shape;
  auto plan = std::make_unique<Plan>();
  // fp32 accumulation always; TF32 only where asked (--allow-tf32) and only for fp32 operands. Scale type fp32.
  const cublasComputeType_t compute = s.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F), call, "cublasLtMatmulDescCreate");
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, operation(s.trans_a), call);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, operation(s.trans_b), call);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue(s.epilogue), call);
  if (s.epilogue != GemmEpilogue::none) {
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, data_type(s.bias_type), call);
    // The heuristic reads the bias pointer's alignment (cublasLt.h): the first call's is set before it; the rules
    // hold every later one to 16 bytes too.
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, call.data.bias, call);
  }
  const auto layout = [&](cublasLtMatrixLayout_t* out, const MatrixLayout& l) {
    check(cublasLtMatrixLayoutCreate(out, data_type(l.type), static_cast<uint64_t>(l.rows),
                                     static_cast<uint64_t>(l.cols), l.ld),
          call, "cublasLtMatrixLayoutCreate");
    if (l.batch_count > 1) {
      check(cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &l.batch_count,
                                             sizeof l.batch_count),
            call, "cublasLtMatrixLayoutSetAttribute");
      check(cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &l.batch_stride,
                                             sizeof l.batch_stride),
            call, "cublasLtMatrixLayoutSetAttribute");
    }
  };
  layout(&plan->a, s.a);
  layout(&plan->b, s.b);
  layout(&plan->c, s.c);
  layout(&plan->d, s.d);

  cublasLtMatmulPreference_t preference = nullptr;
  check(cublasLtMatmulPreferenceCreate(&preference), call, "cublasLtMatmulPreferenceCreate");
  cublasLtMatmulHeuristicResult_t results[kHeuristicAlgorithms] = {};
  int found_count = 0;
  const cublasStatus_t status = [&] {
    const uint64_t bytes = workspace_bytes_;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &bytes, sizeof bytes);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    // The rules guarantee 16-byte pointers; saying so lets the heuristic pick the vectorised kernels.
    const uint32_t alignment = static_cast<uint32_t>(kLibraryAlignmentBytes);
    for (const cublasLtMatmulPreferenceAttributes_t attribute :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      st = cublasLtMatmulPreferenceSetAttribute(preference, attribute, &alignment, sizeof alignment);
      if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    return cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c, plan->d, preference,
                                          kHeuristicAlgorithms, results, &found_count);
  }();
  cublasLtMatmulPreferenceDestroy(preference);
  check(status, call, "cublasLtMatmulAlgoGetHeuristic");
  for (int i = 0; i < found_count && i < kHeuristicAlgorithms; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) plan->algos.push_back(results[i].algo);
  }
  if (plan->algos.empty()) {
    throw std::runtime_error(describe(call) + ": cuBLASLt has no algorithm for this call");
  }
  return *plans_.emplace(call.shape, std::move(plan)).first->second;
}

void GemmExecutor::run(const GemmCall& call, cudaStream_t stream) {
  const std::vector<std::string> violations = gemm_rule_violations(call);
  if (!violations.empty()) {
    std::string message = describe(call) + " breaks cuBLASLt's rules:";
    for (const std::string& v : violations) message += "\n  " + v;
    throw std::runtime_error(message);
  }
  Plan& plan = plan_for(call);
  if (call.shape.epilogue != GemmEpilogue::none) {
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, call.data.bias, call);
  }
  const float alpha = call.shape.alpha, beta = call.shape.beta;
  // beta = 0: C is not read; cuBLASLt still wants a pointer, D serves.
  const void* c = call.shape.beta != 0.0f ? call.data.c : call.data.d;
  // An algorithm the heuristic offered may still be refused when it runs (NOT_SUPPORTED, INVALID_VALUE: a pointer's
  // alignment, the workspace): the next one is tried, and the refused one dropped for this shape. A refusal writes
  // nothing, so D is as it was for the next try.
  std::string refusals;
  while (!plan.algos.empty()) {
    const cublasStatus_t status =
        cublasLtMatmul(handle_, plan.desc, &alpha, call.data.a, plan.a, call.data.b, plan.b, &beta, c, plan.c,
                       call.data.d, plan.d, &plan.algos.front(), workspace_, workspace_bytes_, stream);
    if (status == CUBLAS_STATUS_SUCCESS) return;
    if (status != CUBLAS_STATUS_NOT_SUPPORTED && status != CUBLAS_STATUS_INVALID_VALUE) {
      check(status, call, "cublasLtMatmul");
    }
    refusals += (refusals.empty() ? "" : ", ") + status_name(status);
    plan.algos.erase(plan.algos.begin());
    ++refused_algorithms_;
  }
  throw std::runtime_error(describe(call) + ": cublasLtMatmul refused every algorithm the heuristic offered (" +
                           refusals + ")");
}

}  // namespace vitpipe::cuda
