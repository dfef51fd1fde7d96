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
// The composite backward graph adds the constant 1, its two fp32 intermediates kept in the workspace, and virtual
// tensors numbered from kFirstVirtual.
enum TensorId : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kDO,
  kDQ,
  kDK,
  kDV,
  kOne,
  kSoftmaxSum,
  kDqAccumulator,
  kFirstVirtual = 100
};

[[noreturn]] void fail(const char* what, const std::string& message) {
  throw std::runtime_error(std::string(what) + ": cuDNN SDPA: " + message);
}

void check(cudnnStatus_t status, const char* what, const char* step) {
  if (status != CUDNN_STATUS_SUCCESS) fail(what, std::string(step) + " failed: " + cudnnGetErrorString(status));
}

// fail()'s message without its "<what>: cuDNN SDPA: " prefix, for a refusal kept per shape and reported once.
std::string reason(const std::runtime_error& e, const char* what) {
  const std::string message = e.what(), prefix = std::string(what) + ": cuDNN SDPA: ";
  return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
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
  // Which engine configurations a plan may take: any; only those cuDNN does not mark non-deterministic; or those
  // first and the others after (the composite graph's dP-workspace variant is deterministic by construction, and
  // cudnn-frontend does not filter its engines by numerical note).
  enum class Engines { any, deterministic_only, deterministic_first };

  std::vector<std::unique_ptr<Descriptor>> keep;
  Descriptor* plan = nullptr;
  int64_t workspace_bytes = 0;  // the engine's own
  // Non-virtual intermediates the graph keeps in device memory, placed in the workspace after the engine's part, each
  // at a kWorkspaceAlignment boundary (cudnn-frontend's "workspace modifications"). `zeroed`: set to 0 before every
  // execution (the frontend's memset modification: the dQ accumulator, which the engine adds into).
  struct WorkspaceTensor {
    int64_t id, bytes;
    bool zeroed;
  };
  std::vector<WorkspaceTensor> workspace_tensors;
  std::string path;       // which graph and engine, for attention_path
  bool uses_one = false;  // the composite graph's constant 1 (kOne) is in its variant pack
  bool native = false;    // the native SDPA_BWD (replaced by the composite graph if it fails to execute)
  int64_t next_virtual = kFirstVirtual;

  static constexpr int64_t kWorkspaceAlignment = 256;
  static int64_t aligned(int64_t bytes) {
    return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
  }

  int64_t total_workspace_bytes() const {
    int64_t total = aligned(workspace_bytes);
    for (const WorkspaceTensor& t : workspace_tensors) total += aligned(t.bytes);
    return total;
  }

  Descriptor& add(cudnnBackendDescriptorType_t type, const char* what) {
    keep.push_back(std::make_unique<Descriptor>(type, what));
    return *keep.back();
  }

  Descriptor& make_tensor(cudnnDataType_t type, const std::array<int64_t, 4>& dims,
                          const std::array<int64_t, 4>& strides, int64_t id, bool is_virtual, const char* what) {
    Descriptor& d = add(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    const int64_t alignment = 16;
    d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id);
    d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    if (is_virtual) d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    d.finalize();
    return d;
  }

  Descriptor& tensor(const StridedTensor4d& t, int64_t id, const char* what) {
    return make_tensor(data_type(t.type), t.dims, t.strides, id, false, what);
  }

  Descriptor& virtual_tensor(cudnnDataType_t type, const std::array<int64_t, 4>& dims,
                             const std::array<int64_t, 4>& strides, const char* what) {
    return make_tensor(type, dims, strides, next_virtual++, true, what);
  }

  // A [1, 1, 1, 1] fp32 tensor passed by value (a host float in the variant pack): the scale, or the constant 1. Its
  // byte alignment is 16, as cudnn-frontend gives every tensor it creates.
  Descriptor& scalar(int64_t id, const char* what) {
    Descriptor& d = add(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    const cudnnDataType_t type = CUDNN_DATA_FLOAT;
    const std::array<int64_t, 4> ones = {1, 1, 1, 1};
    const int64_t alignment = 16;
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

  // y = mode(x[, b]) in fp32 arithmetic.
  Descriptor& pointwise(cudnnPointwiseMode_t mode, Descriptor& x, Descriptor* b, Descriptor& y, const char* what) {
    Descriptor& desc = add(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    desc.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    desc.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision);
    desc.finalize();
    Descriptor& op = add(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc);
    op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b != nullptr) op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
    op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    op.finalize();
    return op;
  }

  // c = a b per (batch, head), fp32 accumulation.
  Descriptor& matmul(Descriptor& a, Descriptor& b, Descriptor& c, const char* what) {
    Descriptor& desc = add(CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    desc.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    desc.finalize();
    Descriptor& op = add(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_DESC, desc);
    op.finalize();
    return op;
  }

  // y = the sum of x over the dimensions where y has extent 1.
  Descriptor& reduction_add(Descriptor& x, Descriptor& y, const char* what) {
    Descriptor& desc = add(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
    const cudnnReduceTensorOp_t add_op = CUDNN_REDUCE_TENSOR_ADD;
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    desc.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &add_op);
    desc.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    desc.finalize();
    Descriptor& op = add(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
    op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc);
    op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    op.finalize();
    return op;
  }

  // y: x's elements under other dimensions and strides (here: a transposed view).
  Descriptor& reshape(Descriptor& x, Descriptor& y, const char* what) {
    Descriptor& op = add(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
    op.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    op.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    op.finalize();
    return op;
  }

  // The operation graph of `ops`, then the first engine configuration of heuristic mode A that finalises (as
  // `engines` allows) and fits the workspace. Empty on success, else why none did.
  std::string try_build(cudnnHandle_t handle, const std::vector<Descriptor*>& ops, Engines engines, const char* what) {
    try {
      Descriptor& graph = add(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, what);
      std::vector<cudnnBackendDescriptor_t> raw_ops;
      for (const Descriptor* op : ops) raw_ops.push_back(op->get());
      graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw_ops.size()),
                raw_ops.data());
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
      if (count == 0) return "no engine configuration for this graph";
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
      const int passes = engines == Engines::deterministic_first ? 2 : 1;
      for (int pass = 0; pass < passes; ++pass) {
        for (int64_t i = 0; i < count; ++i) {
          if (configs[static_cast<size_t>(i)] == nullptr) continue;  // taken by the plan
          const bool marked = !is_deterministic(*configs[static_cast<size_t>(i)], what);
          if (engines != Engines::any && marked && pass == 0) {
            if (engines == Engines::deterministic_only) ++nondeterministic;
            continue;
          }
          if (pass == 1 && !marked) continue;  // tried in the first pass
          auto candidate = std::make_unique<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, what);
          cudnnBackendDescriptor_t config = configs[static_cast<size_t>(i)]->get();
          candidate->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
          candidate->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config);
          if (candidate->try_finalize() != CUDNN_STATUS_SUCCESS) {
            ++not_finalised;
            continue;
          }
          int64_t bytes = 0, got = 0;
          check(cudnnBackendGetAttribute(candidate->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                         1, &got, &bytes),
                what, "reading the workspace size");
          if (bytes > static_cast<int64_t>(kMaxWorkspaceBytes)) {
            ++too_much_workspace;
            continue;
          }
          workspace_bytes = bytes;
          if (marked && engines != Engines::any) path += ", on an engine cuDNN marks non-deterministic";
          keep.push_back(std::move(configs[static_cast<size_t>(i)]));  // the plan refers to its configuration
          keep.push_back(std::move(candidate));
          plan = keep.back().get();
          return "";
        }
      }
      return std::string("none of ") + std::to_string(count) + " engine configurations finalises" +
             (engines == Engines::deterministic_only ? " deterministically" : "") + " within the workspace (" +
             std::to_string(nondeterministic) + " non-deterministic, " + std::to_string(not_finalised) +
             " not finalising, " + std::to_string(too_much_workspace) + " asking over " +
             std::to_string(kMaxWorkspaceBytes >> 20) + " MiB of workspace)";
    } catch (const std::runtime_error& e) {
      return reason(e, what);
    }
  }

  void build(cudnnHandle_t handle, Descriptor& operation, Engines engines, const char* what) {
    if (const std::string why = try_build(handle, {&operation}, engines, what); !why.empty()) fail(what, why);
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

// [b, h, s, d] as [b, h, d, s]: the same memory, the last two dimensions swapped.
StridedTensor4d transposed(StridedTensor4d t) {
  std::swap(t.dims[2], t.dims[3]);
  std::swap(t.strides[2], t.strides[3]);
  return t;
}

// cudnn-frontend's composite sdpa_backward graph (include/cudnn_frontend/node/scaled_dot_product_flash_attention.h,
// CompositeSDPABackwardNode::expand_node; no mask, bias, dropout, sink or ragged layout), transcribed op by op with
// its names, intermediates fp32 (the frontend's intermediate and compute type) except the transposed P and dS that
// feed the bf16 matmuls. K and V enter transposed ([b, h, d, s_kv]), as the frontend maps them.
//   D = rowsum(dO * O) * 1 (non-virtual fp32 "softmax_sum" in the workspace); S = Q K^T; P = exp(S scale - stats);
//   dV = P^T dO; dS = (dO V^T - D) P scale; dK = dS^T Q; dQ = dS K.
// dp_workspace (the frontend's deterministic variant: "use_dp_workspace", forced when is_deterministic_algorithm is
// asked on Hopper) writes dQ straight from the matmul, the engine keeping dP in its own workspace; otherwise dQ
// accumulates in a non-virtual fp32 "dQ_accum" (workspace) copied to dQ by an identity op (atomics: not
// deterministic).
std::vector<Descriptor*> composite_backward_graph(SdpaExecutor::Plan& p, const SdpaBackwardShape& s, bool dp_workspace,
                                                  const char* what) {
  const int64_t b = s.batch, h = s.heads, sq = s.s_q, skv = s.s_kv, d = s.head_dim;
  const cudnnDataType_t io = data_type(s.q.type), f32 = CUDNN_DATA_FLOAT;
  const std::array<int64_t, 4> scores_dims = {b, h, sq, skv}, scores_strides = {h * sq * skv, sq * skv, skv, 1};
  const std::array<int64_t, 4> scores_t_dims = {b, h, skv, sq}, scores_t_strides = {h * sq * skv, sq * skv, 1, skv};
  const std::array<int64_t, 4> rows_dims = {b, h, sq, 1}, rows_strides = {h * sq, sq, 1, 1};

  Descriptor& q = p.tensor(s.q, kQ, what);
  Descriptor& k_t = p.tensor(transposed(s.k), kK, what);
  Descriptor& v_t = p.tensor(transposed(s.v), kV, what);
  Descriptor& o = p.tensor(s.o, kO, what);
  Descriptor& d_o = p.tensor(s.d_o, kDO, what);
  Descriptor& stats = p.tensor(s.stats, kStats, what);
  Descriptor& d_q = p.tensor(s.d_q, kDQ, what);
  Descriptor& d_k = p.tensor(s.d_k, kDK, what);
  Descriptor& d_v = p.tensor(s.d_v, kDV, what);
  Descriptor& scale = p.scalar(kScale, what);
  Descriptor& one = p.scalar(kOne, what);
  p.uses_one = true;
  std::vector<Descriptor*> ops;

  // "dO * o => softmax_sum"
  Descriptor& do_o = p.virtual_tensor(f32, {b, h, sq, d}, {h * sq * d, sq * d, h * d, 1}, what);
  ops.push_back(&p.pointwise(CUDNN_POINTWISE_MUL, d_o, &o, do_o, what));  // mul_dO_O
  Descriptor& row_sum = p.virtual_tensor(f32, rows_dims, rows_strides, what);
  ops.push_back(&p.reduction_add(do_o, row_sum, what));  // reduce_dO_o
  Descriptor& softmax_sum = p.make_tensor(f32, rows_dims, rows_strides, kSoftmaxSum, false, what);
  p.workspace_tensors.push_back({kSoftmaxSum, b * h * sq * int64_t{sizeof(float)}, false});
  ops.push_back(&p.pointwise(CUDNN_POINTWISE_MUL, row_sum, &one, softmax_sum, what));  // scale_dropout_inv

  // "Q @ KT => exp_softmax => dV"
  Descriptor& scores = p.virtual_tensor(f32, scores_dims, scores_strides, what);
  ops.push_back(&p.matmul(q, k_t, scores, what));  // matmul_Q_KT
  Descriptor& scaled = p.virtual_tensor(f32, scores_dims, scores_strides, what);
  ops.push_back(&p.pointwise(CUDNN_POINTWISE_MUL, scores, &scale, scaled, what));  // mul_s_attn_scale
  Descriptor& shifted = p.virtual_tensor(f32, scores_dims, scores_strides, what);
  ops.push_back(&p.pointwise(CUDNN_POINTWISE_SUB, scaled, &stats, shifted, what));  // sub_s_m
  Descriptor& probs = p.virtual_tensor(f32, scores_dims, scores_strides, what);
  ops.push_back(&p.pointwise(CUDNN_POINTWISE_EXP, shifted, nullptr, probs, what));  // exp_s
  Descriptor& probs_t = p.virtual_tensor(io, scores_t_dims, scores_t_strides, what);
  ops.push_back(&p.reshape(probs, probs_t, what));    // reshape_p
  ops.push_back(&p.matmul(probs_t, d_o, d_v, what));  // matmul_pT_dO

  // "dO @ VT => dS_output => dK"
  Descriptor& dp = p.virtual_tensor(f32, scores_dims, scores_strides, what);
  ops.push_back(&p.matmul(d_o, v_t, dp, what));  // matmul_dO_VT
  Descriptor& dp_centred = p.virtual_tensor(f32, scores_dims, scores_strides, what);
  ops.push_back(&p.pointwise(CUDNN_POINTWISE_SUB, dp, &softmax_sum, dp_centred, what));  // sub_dP_softmax_sum
  Descriptor& ds_unscaled = p.virtual_tensor(f32, scores_dims, scores_strides, what);
  ops.push_back(&p.pointwise(CUDNN_POINTWISE_MUL, dp_centred, &probs, ds_unscaled, what));  // mul_dP_exp_s
  Descriptor& ds = p.virtual_tensor(f32, scores_dims, scores_strides, what);
  ops.push_back(&p.pointwise(CUDNN_POINTWISE_MUL, ds_unscaled, &scale, ds, what));  // mul_dS_attn_scale
  Descriptor& ds_t = p.virtual_tensor(io, scores_t_dims, scores_t_strides, what);
  ops.push_back(&p.reshape(ds, ds_t, what));     // reshape_dS
  ops.push_back(&p.matmul(ds_t, q, d_k, what));  // matmul_dST_Q

  // "dp_scaled @ K => dQ"
  Descriptor& k = p.virtual_tensor(f32, s.k.dims, s.k.strides, what);
  ops.push_back(&p.reshape(k_t, k, what));  // reshape_k
  if (dp_workspace) {
    ops.push_back(&p.matmul(ds, k, d_q, what));  // matmul_dS_K
  } else {
    const std::array<int64_t, 4> dq_dims = {b, h, sq, d}, dq_strides = {h * sq * d, sq * d, d, 1};
    // Zeroed before each execution: the matmul adds into it. cudnn-frontend memsets it for cuDNN before 9.6 (its
    // engines zero it themselves since); one memset is right for both. (Frontends of the cuDNN 8.9-9.5 era also
    // reordered it F16x16; the current one, transcribed here, does not.)
    Descriptor& accumulator = p.make_tensor(f32, dq_dims, dq_strides, kDqAccumulator, false, what);
    p.workspace_tensors.push_back({kDqAccumulator, b * h * sq * d * int64_t{sizeof(float)}, true});
    ops.push_back(&p.matmul(ds, k, accumulator, what));                                      // matmul_dS_K
    ops.push_back(&p.pointwise(CUDNN_POINTWISE_IDENTITY, accumulator, nullptr, d_q, what));  // identity_dQ
  }
  return ops;
}

}  // namespace

namespace {

void refuse_if_broken(const char* what, const std::vector<std::string>& violations) {
  if (violations.empty()) return;
  std::string message = "the call breaks its rules:";
  for (const std::string& v : violations) message += "\n  " + v;
  fail(what, message);
}

void execute(cudnnHandle_t handle, const SdpaExecutor::Plan& plan, void* workspace, cudaStream_t stream,
             std::vector<int64_t> ids, std::vector<void*> pointers, const char* what) {
  check(cudnnSetStream(handle, stream), what, "cudnnSetStream");
  // The graph's own intermediates after the engine's workspace.
  int64_t offset = SdpaExecutor::Plan::aligned(plan.workspace_bytes);
  for (const SdpaExecutor::Plan::WorkspaceTensor& t : plan.workspace_tensors) {
    char* at = static_cast<char*>(workspace) + offset;
    if (t.zeroed) {
      const cudaError_t zeroed = cudaMemsetAsync(at, 0, static_cast<size_t>(t.bytes), stream);
      if (zeroed != cudaSuccess) fail(what, std::string("zeroing the dQ accumulator: ") + cudaGetErrorString(zeroed));
    }
    ids.push_back(t.id);
    pointers.push_back(at);
    offset += SdpaExecutor::Plan::aligned(t.bytes);
  }
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, what);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(ids.size()), ids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(pointers.size()),
           pointers.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  check(cudnnBackendExecute(handle, plan.plan->get(), pack.get()), what, "cudnnBackendExecute");
}

// The first cuDNN version whose composite backward cudnn-frontend builds without its "workaround padding mask"
// (added up to 9.15 when s_kv is not a multiple of 128; not transcribed here).
constexpr size_t kCompositeWithoutWorkaroundVersion = 91600;

}  // namespace

SdpaExecutor::SdpaExecutor(cudnnHandle_t handle, WorkspaceSource workspace)
    : handle_(handle), workspace_(std::move(workspace)) {}

SdpaExecutor::~SdpaExecutor() = default;

std::string SdpaExecutor::backward_path(const SdpaBackwardShape& shape) const {
  const auto it = backward_plans_.find(shape);
  return it == backward_plans_.end() || !it->second ? "" : it->second->path;
}

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
    Descriptor& scale = plan->scalar(kScale, call.what);
    Descriptor& op = plan->add(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, call.what);
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, q);
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, k);
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, v);
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, o);
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, stats);  // stats given: training, lse saved
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, scale);
    op.finalize();
    plan->build(handle_, op, Plan::Engines::any, call.what);
    slot = std::move(plan);
  }
  float scale = call.shape.attn_scale;
  execute(handle_, *slot, workspace_(static_cast<size_t>(slot->total_workspace_bytes())), stream,
          {kQ, kK, kV, kO, kStats, kScale},
          {const_cast<void*>(call.q), const_cast<void*>(call.k), const_cast<void*>(call.v), call.o, call.stats, &scale},
          call.what);
}

namespace {

// The native SDPA_BWD operation: one descriptor, cuDNN's own graph. Deterministic engines only when asked.
std::string try_native_backward(SdpaExecutor::Plan& plan, cudnnHandle_t handle, const SdpaBackwardShape& s,
                                const char* what) {
  try {
    Descriptor& op = plan.add(CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR, what);
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, plan.tensor(s.q, kQ, what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, plan.tensor(s.k, kK, what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, plan.tensor(s.v, kV, what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, plan.tensor(s.o, kO, what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, plan.tensor(s.d_o, kDO, what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, plan.tensor(s.stats, kStats, what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, plan.tensor(s.d_q, kDQ, what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, plan.tensor(s.d_k, kDK, what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, plan.tensor(s.d_v, kDV, what));
    op.set_descriptor(CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, plan.scalar(kScale, what));
    op.finalize();
    plan.path = "cudnn native SDPA_BWD";
    plan.native = true;
    return plan.try_build(
        handle, {&op},
        s.deterministic ? SdpaExecutor::Plan::Engines::deterministic_only : SdpaExecutor::Plan::Engines::any, what);
  } catch (const std::runtime_error& e) {
    return reason(e, what);
  }
}

// cudnn-frontend's composite graph for the shape, after the native SDPA_BWD was refused for `native_refusal`; throws
// both reasons when this cuDNN refuses it too.
std::unique_ptr<SdpaExecutor::Plan> composite_backward_plan(cudnnHandle_t handle, const SdpaBackwardShape& s,
                                                            const std::string& native_refusal, const char* what) {
  auto plan = std::make_unique<SdpaExecutor::Plan>();
  std::string refusal;
  if (cudnnGetVersion() < kCompositeWithoutWorkaroundVersion && s.s_kv % 128 != 0) {
    refusal = "cuDNN " + std::to_string(cudnnGetVersion()) +
              " needs cudnn-frontend's workaround padding mask for s_kv = " + std::to_string(s.s_kv) +
              " (not a multiple of 128), which vitpipe does not build";
  } else {
    plan->path = s.deterministic ? "cudnn composite graph (cudnn-frontend's sdpa_backward, dP workspace: deterministic)"
                                 : "cudnn composite graph (cudnn-frontend's sdpa_backward, fp32 dQ accumulator)";
    const std::vector<Descriptor*> ops = composite_backward_graph(*plan, s, s.deterministic, what);
    refusal = plan->try_build(
        handle, ops,
        s.deterministic ? SdpaExecutor::Plan::Engines::deterministic_first : SdpaExecutor::Plan::Engines::any, what);
  }
  if (!refusal.empty()) fail(what, "the native SDPA_BWD: " + native_refusal + "; the composite graph: " + refusal);
  plan->path += " (the native SDPA_BWD refused: " + native_refusal + ")";
  return plan;
}

}  // namespace

// First the native SDPA_BWD (a single operation, where this cuDNN finalises it), then cudnn-frontend's composite
// graph: its dP-workspace variant when the shape asks for determinism (so that filtering engines cannot leave none),
// else its fp32 dQ-accumulator variant. The first that finalises is cached for the shape; a native plan that
// finalises but fails to execute is replaced by the composite graph (then kept); both refused, the call is.
void SdpaExecutor::run(const SdpaBackwardCall& call, cudaStream_t stream) {
  refuse_if_broken(call.what, sdpa_rule_violations(call));
  const SdpaBackwardShape& s = call.shape;
  const auto plan_or_refuse = [&](const std::string& native_refusal) {
    try {
      backward_plans_[s] = composite_backward_plan(handle_, s, native_refusal, call.what);
    } catch (const std::runtime_error&) {
      backward_plans_.erase(s);
      throw;
    }
  };
  if (!backward_plans_[s]) {
    auto native = std::make_unique<Plan>();
    const std::string native_refusal = try_native_backward(*native, handle_, s, call.what);
    if (native_refusal.empty()) {
      backward_plans_[s] = std::move(native);
    } else {
      plan_or_refuse(native_refusal);
    }
  }
  float scale = call.shape.attn_scale, one = 1.0f;
  const auto run_plan = [&](const Plan& plan) {
    std::vector<int64_t> ids = {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kScale};
    std::vector<void*> pointers = {const_cast<void*>(call.q),
                                   const_cast<void*>(call.k),
                                   const_cast<void*>(call.v),
                                   const_cast<void*>(call.o),
                                   const_cast<void*>(call.d_o),
                                   const_cast<float*>(call.stats),
                                   call.d_q,
                                   call.d_k,
                                   call.d_v,
                                   &scale};
    if (plan.uses_one) ids.push_back(kOne), pointers.push_back(&one);
    execute(handle_, plan, workspace_(static_cast<size_t>(plan.total_workspace_bytes())), stream, std::move(ids),
            std::move(pointers), call.what);
  };
  try {
    run_plan(*backward_plans_.at(s));
  } catch (const std::runtime_error& e) {
    if (!backward_plans_.at(s)->native) throw;
    plan_or_refuse("it finalised, then " + reason(e, call.what));
    run_plan(*backward_plans_.at(s));
  }
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
