#include "backend/cuda/sdpa_executor.h"

#include <cudnn_version.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/calls/sdpa_rules.h"

namespace vitpipe::cuda {
namespace {

// The tensors' unique ids in every graph and variant pack.
enum TensorId : int64_t { kQ = 1, kK, kV, kO, kStats, kScale, kDO, kDQ, kDK, kDV };

[[noreturn]] void fail(const char* what, const std::string& message) {
  throw std::runtime_error(std::string(what) + ": cuDNN SDPA: " + message);
}

void check(cudnnStatus_t status, const char* what, const char* step) {
  if (status != CUDNN_STATUS_SUCCESS) fail(what, std::string(step) + " failed: " + cudnnGetErrorString(status));
}

// One backend descriptor, destroyed with its owner (never in a static destructor: plans belong to the backend).
class Descriptor {
 public:
  Descriptor(cudnnBackendDescriptorType_t type, const char* what) : what_(what) {
    check(cudnnBackendCreateDescriptor(type, &d_), what, "cudnnBackendCreateDescriptor");
  }
  ~Descriptor() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values) {
    check(cudnnBackendSetAttribute(d_, name, type, count, values), what_, "cudnnBackendSetAttribute");
  }
  void set_descriptor(cudnnBackendAttributeName_t name, const Descriptor& other) {
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &other.d_);
  }
  void finalize() { check(cudnnBackendFinalize(d_), what_, "cudnnBackendFinalize"); }
  cudnnStatus_t try_finalize() { return cudnnBackendFinalize(d_); }
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  const char* what_;
};

cudnnDataType_t data_type(ElementType type) {
  return type == ElementType::f32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16;
}

}  // namespace

// Every descriptor an execution plan refers to lives as long as the plan.
struct SdpaExecutor::Plan {
  std::vector<std::unique_ptr<Descriptor>> keep;
  Descriptor* plan = nullptr;
  int64_t workspace_bytes = 0;

  Descriptor& add(cudnnBackendDescriptorType_t type, const char* what) {
    keep.push_back(std::make_unique<Descriptor>(type, what));
    return *keep.back();
  }

  Descriptor& tensor(const StridedTensor4d& t, int64_t id, const char* what) {
    Descriptor& d = add(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    const cudnnDataType_t type = data_type(t.type);
    const int64_t alignment = 16;
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dims.data());
    d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.strides.data());
    d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id);
    d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    d.finalize();
    return d;
  }

  // The scale: a [1, 1, 1, 1] fp32 tensor passed by value (a host float in the variant pack).
  Descriptor& scale(const char* what) {
    Descriptor& d = add(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    const cudnnDataType_t type = CUDNN_DATA_FLOAT;
    const std::array<int64_t, 4> ones = {1, 1, 1, 1};
    const int64_t id = kScale, alignment = 4;
    const bool by_value = true;
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, ones.data());
    d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, ones.data());
    d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id);
    d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    d.finalize();
    return d;
  }

  // The operation graph of one operation, then the first engine configuration of heuristic mode A that finalises
  // (deterministic ones only when asked) and fits the workspace.
  void build(cudnnHandle_t handle, Descriptor& operation, bool deterministic, const char* what) {
    Descriptor& graph = add(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, what);
    cudnnBackendDescriptor_t op = operation.get();
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    graph.finalize();

    Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, what);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    heuristics.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
    heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    heuristics.finalize();
    int64_t count = 0;
    check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                   &count, nullptr),
          what, "counting the engine configurations");
    if (count == 0) fail(what, "no engine configuration for this graph");
    std::vector<std::unique_ptr<Descriptor>> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      configs.push_back(std::make_unique<Descriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, what));
      raw.push_back(configs.back()->get());
    }
    check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   count, &count, raw.data()),
          what, "reading the engine configurations");

    // Why each configuration was passed over, for the refusal's message.
    int64_t nondeterministic = 0, not_finalised = 0, too_much_workspace = 0;
    for (int64_t i = 0; i < count; ++i) {
      if (deterministic && !is_deterministic(*configs[static_cast<size_t>(i)], what)) {
        ++nondeterministic;
        continue;
      }
      auto candidate = std::make_unique<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, what);
      cudnnBackendDescriptor_t config = configs[static_cast<size_t>(i)]->get();
      candidate->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      candidate->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config);
      if (candidate->try_finalize() != CUDNN_STATUS_SUCCESS) {
        ++not_finalised;
        continue;
      }
      int64_t bytes = 0, got = 0;
      check(cudnnBackendGetAttribute(candidate->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                     &got, &bytes),
            what, "reading the workspace size");
      if (bytes > static_cast<int64_t>(kMaxWorkspaceBytes)) {
        ++too_much_workspace;
        continue;
      }
      workspace_bytes = bytes;
      keep.push_back(std::move(configs[static_cast<size_t>(i)]));  // the plan refers to its configuration
      keep.push_back(std::move(candidate));
      plan = keep.back().get();
      return;
    }
    fail(what, std::string("none of ") + std::to_string(count) + " engine configurations finalises" +
                   (deterministic ? " deterministically" : "") + " within the workspace (" +
                   std::to_string(nondeterministic) + " non-deterministic, " + std::to_string(not_finalised) +
                   " not finalising, " + std::to_string(too_much_workspace) + " asking over " +
                   std::to_string(kMaxWorkspaceBytes >> 20) + " MiB of workspace)");
  }

  static bool is_deterministic(const Descriptor& config, const char* what) {
    Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR, what);
    cudnnBackendDescriptor_t e = engine.get();
    int64_t got = 0;
    if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                                 &e) != CUDNN_STATUS_SUCCESS) {
      return false;
    }
    std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
    int64_t n = 0;
    if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 static_cast<int64_t>(notes.size()), &n, notes.data()) != CUDNN_STATUS_SUCCESS) {
      return false;
    }
    return std::find(notes.begin(), notes.begin() + n, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) == notes.begin() + n;
  }
};

namespace {

void refuse_if_broken(const char* what, const std::vector<std::string>& violations) {
  if (violations.empty()) return;
  std::string message = "the call breaks its rules:";
  for (const std::string& v : violations) message += "\n  " + v;
  fail(what, message);
}

void execute(cudnnHandle_t handle, const SdpaExecutor::Plan& plan, void* workspace, cudaStream_t stream,
             const std::vector<int64_t>& ids, const std::vector<void*>& pointers, const char* what) {
  check(cudnnSetStream(handle, stream), what, "cudnnSetStream");
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, what);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(ids.size()), ids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(pointers.size()),
           pointers.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  check(cudnnBackendExecute(handle, plan.plan->get(), pack.get()), what, "cudnnBackendExecute");
}

}  // namespace

SdpaExecutor::SdpaExecutor(cudnnHandle_t handle, WorkspaceSource workspace)
    : handle_(handle), workspace_(std::move(workspace)) {}

SdpaExecutor::~SdpaExecutor() = default;

#if CUDNN_VERSION >= 91300  // the native SDPA operation descriptors

void SdpaExecutor::run(const SdpaForwardCall& call, cudaStream_t stream) {
  refuse_if_broken(call.what, sdpa_rule_violations(call));
  auto& slot = forward_plans_[call.shape];
  if (!slot) {
    auto plan = std::make_unique<Plan>();
    const SdpaForwardShape& s = call.shape;
    Descriptor& q = plan->tensor(s.q, kQ, call.what);
    Descriptor& k = plan->tensor(s.k, kK, call.what);
    Descriptor& v = plan->tensor(s.v, kV, call.what);
    Descriptor& o = plan->tensor(s.o, kO, call.what);
    Descriptor& stats = plan->tensor(s.stats, kStats, call.what);
    Descriptor& scale = plan->scale(call.what);
    Descriptor& op = plan->add(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, call.what);
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, q);
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, k);
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, v);
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, o);
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, stats);  // stats given: training, lse saved
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, scale);
    op.finalize();
    plan->build(handle_, op, false, call.what);
    slot = std::move(plan);
  }
  float scale = call.shape.attn_scale;
  execute(handle_, *slot, workspace_(static_cast<size_t>(slot->workspace_bytes)), stream,
          {kQ, kK, kV, kO, kStats, kScale},
          {const_cast<void*>(call.q), const_cast<void*>(call.k), const_cast<void*>(call.v), call.o, call.stats, &scale},
          call.what);
}

void SdpaExecutor::run(const SdpaBackwardCall& call, cudaStream_t stream) {
  refuse_if_broken(call.what, sdpa_rule_violations(call));
  auto& slot = backward_plans_[call.shape];
  if (!slot) {
    auto plan = std::make_unique<Plan>();
    const SdpaBackwardShape& s = call.shape;
    Descriptor& op = plan->add(CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR, call.what);
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, plan->tensor(s.q, kQ, call.what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, plan->tensor(s.k, kK, call.what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, plan->tensor(s.v, kV, call.what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, plan->tensor(s.o, kO, call.what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, plan->tensor(s.d_o, kDO, call.what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, plan->tensor(s.stats, kStats, call.what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, plan->tensor(s.d_q, kDQ, call.what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, plan->tensor(s.d_k, kDK, call.what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, plan->tensor(s.d_v, kDV, call.what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, plan->scale(call.what));
    op.finalize();
    plan->build(handle_, op, s.deterministic, call.what);
    slot = std::move(plan);
  }
  float scale = call.shape.attn_scale;
  execute(handle_, *slot, workspace_(static_cast<size_t>(slot->workspace_bytes)), stream,
          {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kScale},
          {const_cast<void*>(call.q), const_cast<void*>(call.k), const_cast<void*>(call.v), const_cast<void*>(call.o),
           const_cast<void*>(call.d_o), const_cast<float*>(call.stats), call.d_q, call.d_k, call.d_v, &scale},
          call.what);
}

#else

void SdpaExecutor::run(const SdpaForwardCall& call, cudaStream_t) {
  fail(call.what, "built against cuDNN older than 9.13, without the native SDPA operations");
}
void SdpaExecutor::run(const SdpaBackwardCall& call, cudaStream_t) {
  fail(call.what, "built against cuDNN older than 9.13, without the native SDPA operations");
}

#endif

}  // namespace vitpipe::cuda
