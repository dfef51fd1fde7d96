#include "fake_cudnn.h"

#include <cudnn.h>

#include <array>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <stdexcept>
#include <vector>

#include "backend/cuda/calls/host_elements.h"
#include "backend/cuda/calls/sdpa_interpreter.h"
#include "frontend_sdpa_backward.h"
#include "tensor/dtype.h"

namespace vitpipe::fake_cudnn {
namespace {

struct Attribute {
  cudnnBackendAttributeType_t type;
  std::vector<unsigned char> bytes;
  int64_t count = 0;
};

struct Descriptor {
  cudnnBackendDescriptorType_t type;
  std::map<cudnnBackendAttributeName_t, Attribute> attributes;
  bool finalized = false;
  int engine = -1;              // ENGINECFG and ENGINE: which of the heuristic's configurations
  Descriptor* graph = nullptr;  // ENGINECFG: the graph it was offered for
};

std::string error;

cudnnStatus_t bad(const std::string& why) {
  error = why;
  return CUDNN_STATUS_BAD_PARAM;
}

size_t type_size(cudnnBackendAttributeType_t t) {
  switch (t) {
    case CUDNN_TYPE_HANDLE:
      return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_DATA_TYPE:
      return sizeof(cudnnDataType_t);
    case CUDNN_TYPE_BOOLEAN:
      return sizeof(bool);
    case CUDNN_TYPE_INT64:
      return sizeof(int64_t);
    case CUDNN_TYPE_VOID_PTR:
      return sizeof(void*);
    case CUDNN_TYPE_HEUR_MODE:
      return sizeof(cudnnBackendHeurMode_t);
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
      return sizeof(cudnnBackendDescriptor_t);
    case CUDNN_TYPE_POINTWISE_MODE:
      return sizeof(cudnnPointwiseMode_t);
    case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE:
      return sizeof(cudnnReduceTensorOp_t);
    case CUDNN_TYPE_TENSOR_REORDERING_MODE:
      return sizeof(cudnnBackendTensorReordering_t);
    default:
      return 0;
  }
}

// The attribute type cuDNN documents for each attribute SdpaExecutor may set.
bool expected_type(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t* type) {
  switch (name) {
    case CUDNN_ATTR_TENSOR_DATA_TYPE:
    case CUDNN_ATTR_POINTWISE_MATH_PREC:
    case CUDNN_ATTR_MATMUL_COMP_TYPE:
    case CUDNN_ATTR_REDUCTION_COMP_TYPE:
      *type = CUDNN_TYPE_DATA_TYPE;
      return true;
    case CUDNN_ATTR_POINTWISE_MODE:
      *type = CUDNN_TYPE_POINTWISE_MODE;
      return true;
    case CUDNN_ATTR_REDUCTION_OPERATOR:
      *type = CUDNN_TYPE_REDUCTION_OPERATOR_TYPE;
      return true;
    case CUDNN_ATTR_TENSOR_REORDERING_MODE:
      *type = CUDNN_TYPE_TENSOR_REORDERING_MODE;
      return true;
    case CUDNN_ATTR_TENSOR_DIMENSIONS:
    case CUDNN_ATTR_TENSOR_STRIDES:
    case CUDNN_ATTR_TENSOR_UNIQUE_ID:
    case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT:
    case CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS:
      *type = CUDNN_TYPE_INT64;
      return true;
    case CUDNN_ATTR_TENSOR_IS_BY_VALUE:
    case CUDNN_ATTR_TENSOR_IS_VIRTUAL:
      *type = CUDNN_TYPE_BOOLEAN;
      return true;
    case CUDNN_ATTR_OPERATIONGRAPH_HANDLE:
    case CUDNN_ATTR_EXECUTION_PLAN_HANDLE:
      *type = CUDNN_TYPE_HANDLE;
      return true;
    case CUDNN_ATTR_ENGINEHEUR_MODE:
      *type = CUDNN_TYPE_HEUR_MODE;
      return true;
    case CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS:
    case CUDNN_ATTR_VARIANT_PACK_WORKSPACE:
      *type = CUDNN_TYPE_VOID_PTR;
      return true;
    case CUDNN_ATTR_OPERATIONGRAPH_OPS:
    case CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH:
    case CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG:
    case CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC:
    case CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC:
    case CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC:
    case CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC:
    case CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC:
    case CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC:
    case CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC:
    case CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC:
    case CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC:
    case CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC:
    case CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC:
    case CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC:
    case CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC:
    case CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC:
    case CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC:
    case CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC:
    case CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR:
    case CUDNN_ATTR_OPERATION_POINTWISE_XDESC:
    case CUDNN_ATTR_OPERATION_POINTWISE_BDESC:
    case CUDNN_ATTR_OPERATION_POINTWISE_YDESC:
    case CUDNN_ATTR_OPERATION_MATMUL_ADESC:
    case CUDNN_ATTR_OPERATION_MATMUL_BDESC:
    case CUDNN_ATTR_OPERATION_MATMUL_CDESC:
    case CUDNN_ATTR_OPERATION_MATMUL_DESC:
    case CUDNN_ATTR_OPERATION_REDUCTION_XDESC:
    case CUDNN_ATTR_OPERATION_REDUCTION_YDESC:
    case CUDNN_ATTR_OPERATION_REDUCTION_DESC:
    case CUDNN_ATTR_OPERATION_RESHAPE_XDESC:
    case CUDNN_ATTR_OPERATION_RESHAPE_YDESC:
      *type = CUDNN_TYPE_BACKEND_DESCRIPTOR;
      return true;
    default:
      return false;
  }
}

Descriptor* as(cudnnBackendDescriptor_t d) { return static_cast<Descriptor*>(d); }

template <class T>
std::vector<T> values(const Descriptor& d, cudnnBackendAttributeName_t name) {
  const Attribute& a = d.attributes.at(name);
  std::vector<T> out(static_cast<size_t>(a.count));
  std::memcpy(out.data(), a.bytes.data(), a.bytes.size());
  return out;
}

Descriptor* child(const Descriptor& d, cudnnBackendAttributeName_t name) {
  const auto it = d.attributes.find(name);
  return it == d.attributes.end() ? nullptr : as(values<cudnnBackendDescriptor_t>(d, name)[0]);
}

bool has(const Descriptor& d, std::initializer_list<cudnnBackendAttributeName_t> names) {
  for (const auto n : names) {
    if (!d.attributes.count(n)) return false;
  }
  return true;
}

// A finalised tensor descriptor as the interpreter's strided tensor, and its unique id.
bool strided(const Descriptor* t, cuda::StridedTensor4d* out, int64_t* id) {
  if (t == nullptr || !t->finalized || t->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR) return false;
  const std::vector<int64_t> dims = values<int64_t>(*t, CUDNN_ATTR_TENSOR_DIMENSIONS);
  const std::vector<int64_t> strides = values<int64_t>(*t, CUDNN_ATTR_TENSOR_STRIDES);
  if (dims.size() != 4 || strides.size() != 4) return false;
  const cudnnDataType_t type = values<cudnnDataType_t>(*t, CUDNN_ATTR_TENSOR_DATA_TYPE)[0];
  if (type != CUDNN_DATA_FLOAT && type != CUDNN_DATA_BFLOAT16) return false;
  out->type = type == CUDNN_DATA_FLOAT ? cuda::ElementType::f32 : cuda::ElementType::bf16;
  for (int i = 0; i < 4; ++i) out->dims[i] = dims[i], out->strides[i] = strides[i];
  *id = values<int64_t>(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID)[0];
  return true;
}

// ---- cudnn-frontend's composite backward graph: held to frontend_sdpa_backward.h, then interpreted ----

struct TensorInfo {
  int64_t uid = 0;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::array<int64_t, 4> dims{}, strides{};
  bool is_virtual = false, by_value = false;
  cudnnBackendTensorReordering_t reordering = CUDNN_TENSOR_REORDERING_NONE;
  int64_t alignment = 0;
};

bool flag(const Descriptor& d, cudnnBackendAttributeName_t name) {
  const auto it = d.attributes.find(name);
  return it != d.attributes.end() && !it->second.bytes.empty() && it->second.bytes[0] != 0;
}

bool tensor_info(const Descriptor* t, TensorInfo* out) {
  if (t == nullptr || !t->finalized || t->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR) return false;
  const std::vector<int64_t> dims = values<int64_t>(*t, CUDNN_ATTR_TENSOR_DIMENSIONS);
  const std::vector<int64_t> strides = values<int64_t>(*t, CUDNN_ATTR_TENSOR_STRIDES);
  if (dims.size() != 4 || strides.size() != 4) return false;
  out->uid = values<int64_t>(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID)[0];
  out->type = values<cudnnDataType_t>(*t, CUDNN_ATTR_TENSOR_DATA_TYPE)[0];
  for (int i = 0; i < 4; ++i) out->dims[i] = dims[i], out->strides[i] = strides[i];
  out->is_virtual = flag(*t, CUDNN_ATTR_TENSOR_IS_VIRTUAL);
  out->by_value = flag(*t, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
  out->alignment = values<int64_t>(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT)[0];
  out->reordering = t->attributes.count(CUDNN_ATTR_TENSOR_REORDERING_MODE)
                        ? values<cudnnBackendTensorReordering_t>(*t, CUDNN_ATTR_TENSOR_REORDERING_MODE)[0]
                        : CUDNN_TENSOR_REORDERING_NONE;
  return true;
}

// An operation's tensors in the order frontend_sdpa_backward.h lists them.
std::vector<const Descriptor*> operands(const Descriptor& op) {
  switch (op.type) {
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
      std::vector<const Descriptor*> out = {child(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC)};
      if (const Descriptor* b = child(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC)) out.push_back(b);
      out.push_back(child(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC));
      return out;
    }
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
      return {child(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC), child(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC),
              child(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC)};
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
      return {child(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC), child(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC)};
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
      return {child(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC), child(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC)};
    default:
      return {};
  }
}

std::string text(const std::array<int64_t, 4>& a) {
  return "[" + std::to_string(a[0]) + ", " + std::to_string(a[1]) + ", " + std::to_string(a[2]) + ", " +
         std::to_string(a[3]) + "]";
}

std::string text(const TensorInfo& t) {
  return "uid " + std::to_string(t.uid) + " type " + std::to_string(t.type) + " dims " + text(t.dims) + " strides " +
         text(t.strides) + (t.is_virtual ? " virtual" : "") + (t.by_value ? " by value" : "");
}

std::array<int64_t, 4> swap_last_two(std::array<int64_t, 4> a) {
  std::swap(a[2], a[3]);
  return a;
}

// Empty when `ops` is cudnn-frontend's composite sdpa_backward graph (either variant, *dp_workspace saying which),
// else the first difference, naming the operation and the operand.
std::string composite_graph_difference(const std::vector<const Descriptor*>& ops, bool* dp_workspace) {
  if (ops.size() != 17 && ops.size() != 18) {
    return std::to_string(ops.size()) + " operations; cudnn-frontend's sdpa_backward has 17 (dP workspace) or 18";
  }
  *dp_workspace = ops.size() == 17;
  // The sizes from Q and K^T, matmul_Q_KT's operands.
  const std::vector<const Descriptor*> qk = operands(*ops[3]);
  TensorInfo q, k_t;
  if (qk.size() != 3 || !tensor_info(qk[0], &q) || !tensor_info(qk[1], &k_t)) {
    return "operation 3 is not a matmul of two tensors (cudnn-frontend's matmul_Q_KT)";
  }
  const std::vector<ExpectedOperation> expected =
      frontend_sdpa_backward(q.dims[0], q.dims[1], q.dims[2], k_t.dims[3], q.dims[3], q.type, *dp_workspace);
  std::map<std::string, int64_t> uid_of;
  std::map<int64_t, std::string> role_of;
  for (size_t i = 0; i < ops.size(); ++i) {
    const ExpectedOperation& e = expected[i];
    const Descriptor& op = *ops[i];
    const std::string where = "operation " + std::to_string(i) + " (cudnn-frontend's " + e.name + ")";
    if (op.type != e.kind) return where + ": descriptor type " + std::to_string(op.type);
    if (op.type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
      const Descriptor* pw = child(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
      if (pw == nullptr || values<cudnnPointwiseMode_t>(*pw, CUDNN_ATTR_POINTWISE_MODE)[0] != e.mode) {
        return where + ": pointwise mode, expected " + std::to_string(e.mode);
      }
      if (!pw->attributes.count(CUDNN_ATTR_POINTWISE_MATH_PREC) ||
          values<cudnnDataType_t>(*pw, CUDNN_ATTR_POINTWISE_MATH_PREC)[0] != CUDNN_DATA_FLOAT) {
        return where + ": math precision, expected fp32";
      }
    } else if (op.type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) {
      const Descriptor* mm = child(op, CUDNN_ATTR_OPERATION_MATMUL_DESC);
      if (mm == nullptr || values<cudnnDataType_t>(*mm, CUDNN_ATTR_MATMUL_COMP_TYPE)[0] != CUDNN_DATA_FLOAT) {
        return where + ": matmul compute type, expected fp32";
      }
    } else if (op.type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
      const Descriptor* r = child(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC);
      if (r == nullptr ||
          values<cudnnReduceTensorOp_t>(*r, CUDNN_ATTR_REDUCTION_OPERATOR)[0] != CUDNN_REDUCE_TENSOR_ADD ||
          values<cudnnDataType_t>(*r, CUDNN_ATTR_REDUCTION_COMP_TYPE)[0] != CUDNN_DATA_FLOAT) {
        return where + ": reduction, expected ADD in fp32";
      }
    }
    const std::vector<const Descriptor*> given = operands(op);
    if (given.size() != e.operands.size()) {
      return where + ": " + std::to_string(given.size()) + " operands, expected " + std::to_string(e.operands.size());
    }
    std::vector<TensorInfo> infos(given.size());
    for (size_t j = 0; j < given.size(); ++j) {
      const ExpectedTensor& et = e.operands[j];
      TensorInfo& t = infos[j];
      const std::string operand = where + ", operand " + std::to_string(j) + " (" + et.role + ")";
      if (!tensor_info(given[j], &t)) return operand + ": not a finalised tensor descriptor";
      if (t.type != et.type || t.dims != et.dims || (et.strides && t.strides != *et.strides) ||
          t.is_virtual != et.is_virtual || t.by_value != et.by_value || t.reordering != et.reordering) {
        return operand + ": " + text(t) + " reordering " + std::to_string(t.reordering) +
               "; cudnn-frontend builds type " + std::to_string(et.type) + " dims " + text(et.dims) +
               (et.strides ? " strides " + text(*et.strides) : std::string()) + (et.is_virtual ? " virtual" : "") +
               (et.by_value ? " by value" : "") + " reordering " + std::to_string(et.reordering);
      }
      // cudnn-frontend's create_cudnn_tensor gives every tensor, by-value scalars too, a byte alignment of 16.
      if (t.alignment != 16) return operand + ": byte alignment " + std::to_string(t.alignment) + ", expected 16";
      // A caller's tensor has unit stride along the features (K and V enter transposed).
      const int feature = et.role == "K^T" || et.role == "V^T" ? 2 : 3;
      if (!et.is_virtual && !et.by_value && !et.strides && t.strides[feature] != 1) {
        return operand + ": " + text(t) + " has no unit stride along the features";
      }
      // One uid per role, one role per uid: every operation reads the tensor the frontend's reads.
      const auto [u, new_role] = uid_of.emplace(et.role, t.uid);
      if (u->second != t.uid)
        return operand + ": uid " + std::to_string(t.uid) + " where earlier operations used " +
               std::to_string(u->second);
      const auto [r, new_uid] = role_of.emplace(t.uid, et.role);
      if (r->second != et.role) return operand + ": uid " + std::to_string(t.uid) + " is already " + r->second;
    }
    // A reshape here is a transposed view: the same elements, the last two dimensions swapped.
    if (op.type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR &&
        (infos[1].dims != swap_last_two(infos[0].dims) || infos[1].strides != swap_last_two(infos[0].strides))) {
      return where + ": " + text(infos[1]) + " is not " + text(infos[0]) + " transposed";
    }
  }
  return "";
}

// Runs the graph's operations in order on host memory: caller and workspace tensors through the variant pack's
// pointers, by-value scalars from it, virtual tensors in buffers of the fake's own (each element rounded to its
// tensor's type). Every tensor is read and written through its own dimensions and strides (size-1 dimensions
// broadcast), so a wrong stride or operand shows in the numbers.
class GraphInterpreter {
 public:
  // `accumulator_uid`: the tensor a matmul adds into (the dQ accumulator), 0 for none.
  GraphInterpreter(std::function<void*(int64_t)> pointer_of, int64_t accumulator_uid)
      : pointer_of_(std::move(pointer_of)), accumulator_uid_(accumulator_uid) {}

  void run(const Descriptor& op) {
    const std::vector<const Descriptor*> given = operands(op);
    std::vector<Tensor> t;
    for (const Descriptor* d : given) {
      TensorInfo info;
      if (!tensor_info(d, &info)) throw std::runtime_error("graph: an operand is not a tensor descriptor");
      t.push_back(bind(info, d == given.back()));
    }
    switch (op.type) {
      case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
        const auto mode = values<cudnnPointwiseMode_t>(*child(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR),
                                                       CUDNN_ATTR_POINTWISE_MODE)[0];
        const Tensor& y = t.back();
        for_each(y.info.dims, [&](const Index& i) {
          const double x = t[0].read(i), b = t.size() == 3 ? t[1].read(i) : 0.0;
          double v = 0.0;
          switch (mode) {
            case CUDNN_POINTWISE_MUL:
              v = x * b;
              break;
            case CUDNN_POINTWISE_SUB:
              v = x - b;
              break;
            case CUDNN_POINTWISE_EXP:
              v = std::exp(x);
              break;
            case CUDNN_POINTWISE_IDENTITY:
              v = x;
              break;
            default:
              throw std::runtime_error("graph: a pointwise mode the fake does not run");
          }
          y.write(i, v);
        });
        break;
      }
      case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: {
        const Tensor &x = t[0], &y = t[1];
        // Sums in a dense buffer over y's dimensions.
        const Index& yd = y.info.dims;
        std::vector<double> sums(static_cast<size_t>(yd[0] * yd[1] * yd[2] * yd[3]), 0.0);
        const auto dense = [&](const Index& i) {
          const Index b = broadcast(y.info, i);
          return static_cast<size_t>(((b[0] * yd[1] + b[1]) * yd[2] + b[2]) * yd[3] + b[3]);
        };
        for_each(x.info.dims, [&](const Index& i) { sums[dense(i)] += x.read(i); });
        for_each(yd, [&](const Index& i) { y.write(i, sums[dense(i)]); });
        break;
      }
      case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: {
        const Tensor &a = t[0], &b = t[1], &c = t[2];
        const Index &ad = a.info.dims, &bd = b.info.dims, &cd = c.info.dims;
        if (ad[3] != bd[2] || ad[2] != cd[2] || bd[3] != cd[3]) {
          throw std::runtime_error("graph: matmul of " + text(ad) + " by " + text(bd) + " into " + text(cd));
        }
        // The dQ accumulator (what the graph's identity op reads) is added into, split over key blocks with atomics:
        // the caller zeroes it first (cudnn-frontend's memset workspace modification; cuDNN 9.6 and later engines
        // may zero it themselves, which the fake does not assume).
        const bool accumulates = c.info.uid == accumulator_uid_;
        for_each(cd, [&](const Index& i) {
          double sum = accumulates ? c.read(i) : 0.0;
          for (int64_t k = 0; k < ad[3]; ++k) sum += a.read({i[0], i[1], i[2], k}) * b.read({i[0], i[1], k, i[3]});
          c.write(i, sum);
        });
        break;
      }
      case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: {
        // Y views X's elements: X laid out by its strides in scratch memory, read back with Y's strides.
        const Tensor &x = t[0], &y = t[1];
        if (span(y.info) > span(x.info)) throw std::runtime_error("graph: a reshape past its input's elements");
        std::vector<double> memory(static_cast<size_t>(span(x.info)), 0.0);
        for_each(x.info.dims, [&](const Index& i) { memory[static_cast<size_t>(offset(x.info, i))] = x.read(i); });
        for_each(y.info.dims, [&](const Index& i) { y.write(i, memory[static_cast<size_t>(offset(y.info, i))]); });
        break;
      }
      default:
        throw std::runtime_error("graph: an operation the fake does not run");
    }
  }

 private:
  using Index = std::array<int64_t, 4>;

  // One operand resolved once: a virtual tensor's buffer, a by-value scalar, or caller memory.
  struct Tensor {
    TensorInfo info;
    std::vector<double>* buffer = nullptr;
    void* memory = nullptr;
    cuda::ElementType element = cuda::ElementType::f32;
    double scalar = 0.0;

    double read(const Index& i) const {
      if (info.by_value) return scalar;
      if (buffer != nullptr) return (*buffer)[dense(info, i)];
      return cuda::load_element(memory, element, offset(info, i));
    }
    void write(const Index& i, double v) const {
      if (info.by_value) throw std::runtime_error("graph: writing a by-value tensor");
      if (buffer != nullptr) {
        (*buffer)[dense(info, i)] = rounded(info.type, v);
      } else {
        cuda::store_element(memory, element, offset(info, i), v);
      }
    }
  };

  Tensor bind(const TensorInfo& info, bool output) {
    Tensor t{info};
    if (info.by_value) {
      t.scalar = *static_cast<const float*>(pointer(info));
    } else if (info.is_virtual) {
      auto it = buffers_.find(info.uid);
      if (it == buffers_.end()) {
        if (!output)
          throw std::runtime_error("graph: virtual uid " + std::to_string(info.uid) + " read before written");
        const Index& d = info.dims;
        it = buffers_.emplace(info.uid, std::vector<double>(static_cast<size_t>(d[0] * d[1] * d[2] * d[3]), 0.0)).first;
      }
      t.buffer = &it->second;
    } else {
      t.memory = pointer(info);
      t.element = element(info.type);
    }
    return t;
  }

  template <class F>
  static void for_each(const Index& dims, F&& f) {
    Index i{};
    for (i[0] = 0; i[0] < dims[0]; ++i[0])
      for (i[1] = 0; i[1] < dims[1]; ++i[1])
        for (i[2] = 0; i[2] < dims[2]; ++i[2])
          for (i[3] = 0; i[3] < dims[3]; ++i[3]) f(i);
  }
  static Index broadcast(const TensorInfo& t, Index i) {
    for (int k = 0; k < 4; ++k) i[k] = t.dims[k] == 1 ? 0 : i[k];
    return i;
  }
  static int64_t offset(const TensorInfo& t, const Index& i) {
    int64_t o = 0;
    for (int k = 0; k < 4; ++k) o += (t.dims[k] == 1 ? 0 : i[k]) * t.strides[k];
    return o;
  }
  // A virtual tensor's element in the fake's buffer: by index, not by its strides (cuDNN never materialises a
  // virtual tensor, and the frontend declares some with strides that overlap, as mul_dO_O's [h s d, s d, h d, 1]).
  static size_t dense(const TensorInfo& t, const Index& i) {
    const Index b = broadcast(t, i);
    return static_cast<size_t>(((b[0] * t.dims[1] + b[1]) * t.dims[2] + b[2]) * t.dims[3] + b[3]);
  }
  static int64_t span(const TensorInfo& t) {
    int64_t s = 1;
    for (int k = 0; k < 4; ++k) s += (t.dims[k] - 1) * t.strides[k];
    return s;
  }
  static double rounded(cudnnDataType_t type, double v) {
    if (type == CUDNN_DATA_BFLOAT16) return bf16_to_float(float_to_bf16(static_cast<float>(v)));
    return static_cast<float>(v);
  }
  static cuda::ElementType element(cudnnDataType_t type) {
    if (type == CUDNN_DATA_FLOAT) return cuda::ElementType::f32;
    if (type == CUDNN_DATA_BFLOAT16) return cuda::ElementType::bf16;
    throw std::runtime_error("graph: a data type the fake does not run");
  }
  void* pointer(const TensorInfo& t) {
    void* p = pointer_of_(t.uid);
    if (p == nullptr) throw std::runtime_error("graph: uid " + std::to_string(t.uid) + " is not in the variant pack");
    return p;
  }

  std::function<void*(int64_t)> pointer_of_;
  int64_t accumulator_uid_;
  std::map<int64_t, std::vector<double>> buffers_;
};

}  // namespace

Counters& counters() {
  static Counters c;
  return c;
}
int64_t plan_workspace_bytes = 0;
void set_plan_workspace_bytes(int64_t bytes) { plan_workspace_bytes = bytes; }
int64_t refused_query_rows = 0;
void set_refused_query_rows(int64_t s_q) { refused_query_rows = s_q; }
bool native_backward_refused = true;
void set_native_sdpa_backward_refused(bool refused) { native_backward_refused = refused; }
bool native_backward_execution_fails = false;
void set_native_sdpa_backward_execution_fails(bool fails) { native_backward_execution_fails = fails; }
bool all_engines_nondeterministic = false;
void set_all_engines_nondeterministic(bool all) { all_engines_nondeterministic = all; }
const std::string& last_error() { return error; }

}  // namespace vitpipe::fake_cudnn

using namespace vitpipe::fake_cudnn;

namespace {

// set_refused_query_rows: the operation's Q has that many rows.
bool refuses_query_rows(const Descriptor& op, cudnnBackendAttributeName_t q_name) {
  vitpipe::cuda::StridedTensor4d q;
  int64_t id = 0;
  return refused_query_rows > 0 && strided(child(op, q_name), &q, &id) && q.dims[2] == refused_query_rows;
}

cudnnStatus_t not_supported(const std::string& why) {
  bad(why);
  return CUDNN_STATUS_NOT_SUPPORTED;
}

}  // namespace

extern "C" {

const char* cudnnGetErrorString(cudnnStatus_t status) {
  return status == CUDNN_STATUS_SUCCESS ? "CUDNN_STATUS_SUCCESS" : last_error().c_str();
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t, cudaStream_t) { return CUDNN_STATUS_SUCCESS; }

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* d) {
  *d = new Descriptor{type, {}};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
  delete as(d);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count, const void* elements) {
  cudnnBackendAttributeType_t expected;
  if (!expected_type(name, &expected)) return bad("attribute " + std::to_string(name) + " is not one the fake knows");
  if (type != expected) return bad("attribute " + std::to_string(name) + " set with the wrong type");
  if (as(d)->finalized) return bad("attribute set after finalisation");
  Attribute a{type, std::vector<unsigned char>(type_size(type) * static_cast<size_t>(count)), count};
  std::memcpy(a.bytes.data(), elements, a.bytes.size());
  as(d)->attributes[name] = std::move(a);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t handle) {
  Descriptor& d = *as(handle);
  bool complete = true;
  switch (d.type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
      complete = has(d, {CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_ATTR_TENSOR_STRIDES,
                         CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT});
      break;
    case CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR:
      complete = has(d, {CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC,
                         CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC,
                         CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC});
      if (complete && refuses_query_rows(d, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC)) {
        return not_supported("SDPA_FWD: no engine for this many query rows (the fake's refusal)");
      }
      break;
    case CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR:
      complete = has(d, {CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC,
                         CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC,
                         CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC,
                         CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC,
                         CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC});
      if (complete && refuses_query_rows(d, CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC)) {
        return not_supported("SDPA_BWD: no engine for this many query rows (the fake's refusal)");
      }
      if (complete && native_backward_refused) {
        return bad("SDPA_BWD: CUDNN_STATUS_BAD_PARAM (the fake's refusal, as cuDNN up to 9.20 is reported to)");
      }
      break;
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
      complete = has(d, {CUDNN_ATTR_POINTWISE_MODE, CUDNN_ATTR_POINTWISE_MATH_PREC});
      break;
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
      complete = has(d, {CUDNN_ATTR_MATMUL_COMP_TYPE});
      break;
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR:
      complete = has(d, {CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_ATTR_REDUCTION_COMP_TYPE});
      break;
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
      complete = has(d, {CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                         CUDNN_ATTR_OPERATION_POINTWISE_YDESC});
      break;
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
      complete = has(d, {CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
                         CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_ATTR_OPERATION_MATMUL_DESC});
      break;
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
      complete = has(d, {CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
                         CUDNN_ATTR_OPERATION_REDUCTION_YDESC});
      break;
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
      complete = has(d, {CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_ATTR_OPERATION_RESHAPE_YDESC});
      break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
      complete = has(d, {CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_ATTR_OPERATIONGRAPH_HANDLE});
      if (complete && values<cudnnBackendDescriptor_t>(d, CUDNN_ATTR_OPERATIONGRAPH_OPS).size() > 1) {
        // Any graph of several operations must be cudnn-frontend's composite SDPA backward.
        std::vector<const Descriptor*> ops;
        for (cudnnBackendDescriptor_t op : values<cudnnBackendDescriptor_t>(d, CUDNN_ATTR_OPERATIONGRAPH_OPS)) {
          ops.push_back(as(op));
        }
        bool dp_workspace = false;
        if (const std::string why = composite_graph_difference(ops, &dp_workspace); !why.empty()) {
          return bad("composite SDPA backward graph: " + why);
        }
        vitpipe::cuda::StridedTensor4d q;
        int64_t id = 0;
        if (refused_query_rows > 0 && strided(operands(*ops[3])[0], &q, &id) && q.dims[2] == refused_query_rows) {
          return not_supported("composite SDPA backward: no engine for this many query rows (the fake's refusal)");
        }
        ++counters().composite_graphs_finalized;
        counters().last_composite_dp_workspace = dp_workspace;
      }
      if (complete) ++counters().graphs_finalized;
      break;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
      complete = has(d, {CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_ATTR_ENGINEHEUR_MODE});
      break;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
      complete = has(d, {CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG}) &&
                 child(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG)->graph != nullptr;
      break;
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
      complete = has(d, {CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                         CUDNN_ATTR_VARIANT_PACK_WORKSPACE});
      break;
    default:
      return bad("finalising a descriptor type the fake does not know");
  }
  if (!complete) return bad("finalising an incomplete descriptor of type " + std::to_string(d.type));
  d.finalized = true;
  return CUDNN_STATUS_SUCCESS;
}

// Two engine configurations for every graph: 0 is marked non-deterministic, 1 is not.
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const handle, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t* count,
                                       void* elements) {
  Descriptor& d = *as(handle);
  if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS && type == CUDNN_TYPE_BACKEND_DESCRIPTOR && d.finalized) {
    *count = 2;
    if (requested == 0) return CUDNN_STATUS_SUCCESS;
    for (int64_t i = 0; i < std::min<int64_t>(requested, 2); ++i) {
      Descriptor* config = as(static_cast<cudnnBackendDescriptor_t*>(elements)[i]);
      if (config->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR) return bad("results into a non-ENGINECFG descriptor");
      config->engine = static_cast<int>(i);
      config->graph = child(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
      config->finalized = true;
    }
    *count = std::min<int64_t>(requested, 2);
    return CUDNN_STATUS_SUCCESS;
  }
  if (name == CUDNN_ATTR_ENGINECFG_ENGINE && type == CUDNN_TYPE_BACKEND_DESCRIPTOR && requested >= 1) {
    Descriptor* engine = as(static_cast<cudnnBackendDescriptor_t*>(elements)[0]);
    engine->engine = d.engine;
    engine->finalized = true;
    *count = 1;
    return CUDNN_STATUS_SUCCESS;
  }
  if (name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE && type == CUDNN_TYPE_NUMERICAL_NOTE) {
    *count = d.engine == 0 || all_engines_nondeterministic ? 1 : 0;
    if (*count > requested) return bad("numerical notes: no room");
    if (*count == 1) static_cast<cudnnBackendNumericalNote_t*>(elements)[0] = CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    return CUDNN_STATUS_SUCCESS;
  }
  if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE && type == CUDNN_TYPE_INT64 && d.finalized) {
    *count = 1;
    *static_cast<int64_t*>(elements) = plan_workspace_bytes;
    return CUDNN_STATUS_SUCCESS;
  }
  return bad("get attribute " + std::to_string(name) + " is not one the fake answers");
}

// Rebuilds the SDPA call from the plan's graph and the variant pack, and runs the CPU interpreter on it.
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t, cudnnBackendDescriptor_t plan_handle,
                                  cudnnBackendDescriptor_t pack_handle) {
  using namespace vitpipe::cuda;
  const Descriptor& plan = *as(plan_handle);
  const Descriptor& pack = *as(pack_handle);
  if (!plan.finalized || !pack.finalized) return bad("executing an unfinalised plan or variant pack");
  const Descriptor* config = child(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
  const std::vector<cudnnBackendDescriptor_t> graph_ops =
      values<cudnnBackendDescriptor_t>(*config->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS);
  const Descriptor* op = as(graph_ops[0]);
  const std::vector<int64_t> ids = values<int64_t>(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
  const std::vector<void*> pointers = values<void*>(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
  if (ids.size() != pointers.size()) return bad("variant pack: ids and pointers differ in number");
  const auto pointer_of = [&](int64_t id) -> void* {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] == id) return pointers[i];
    }
    return nullptr;
  };
  // Each named tensor of the operation: its strided description and its pointer from the variant pack.
  const auto tensor = [&](cudnnBackendAttributeName_t name, StridedTensor4d* t, void** p) {
    int64_t id = 0;
    if (!strided(child(*op, name), t, &id)) return false;
    *p = pointer_of(id);
    return *p != nullptr;
  };
  const auto scale_of = [&](cudnnBackendAttributeName_t name, float* scale) {
    const Descriptor* s = child(*op, name);
    if (s == nullptr || !s->attributes.count(CUDNN_ATTR_TENSOR_IS_BY_VALUE)) return false;
    const void* p = pointer_of(values<int64_t>(*s, CUDNN_ATTR_TENSOR_UNIQUE_ID)[0]);
    if (p == nullptr) return false;
    std::memcpy(scale, p, sizeof(float));
    return true;
  };
  try {
    if (graph_ops.size() > 1) {
      // The composite graph, checked against cudnn-frontend's when finalised: run op by op.
      // The dQ accumulator: what the identity op (identity_dQ) reads.
      int64_t accumulator = 0;
      for (cudnnBackendDescriptor_t o : graph_ops) {
        const Descriptor& op = *as(o);
        const Descriptor* pw = child(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
        TensorInfo x;
        if (op.type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR && pw != nullptr &&
            values<cudnnPointwiseMode_t>(*pw, CUDNN_ATTR_POINTWISE_MODE)[0] == CUDNN_POINTWISE_IDENTITY &&
            tensor_info(operands(op)[0], &x)) {
          accumulator = x.uid;
        }
      }
      GraphInterpreter interpreter(pointer_of, accumulator);
      for (cudnnBackendDescriptor_t o : graph_ops) interpreter.run(*as(o));
    } else if (op->type == CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR) {
      SdpaForwardCall call;
      call.what = "fake SDPA_FWD";
      SdpaForwardShape& s = call.shape;
      void *q, *k, *v, *o, *stats;
      if (!tensor(CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, &s.q, &q) ||
          !tensor(CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, &s.k, &k) ||
          !tensor(CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, &s.v, &v) ||
          !tensor(CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, &s.o, &o) ||
          !tensor(CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, &s.stats, &stats) ||
          !scale_of(CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, &s.attn_scale)) {
        return bad("SDPA_FWD: a tensor without descriptor or pointer");
      }
      s.batch = s.q.dims[0], s.heads = s.q.dims[1], s.s_q = s.q.dims[2], s.s_kv = s.k.dims[2], s.head_dim = s.q.dims[3];
      call.q = q, call.k = k, call.v = v, call.o = o, call.stats = static_cast<float*>(stats);
      interpret_sdpa_forward(call);
    } else if (op->type == CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR && native_backward_execution_fails) {
      return bad("SDPA_BWD: CUDNN_STATUS_EXECUTION_FAILED (the fake's failure at execution)");
    } else if (op->type == CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR) {
      SdpaBackwardCall call;
      call.what = "fake SDPA_BWD";
      SdpaBackwardShape& s = call.shape;
      void *q, *k, *v, *o, *d_o, *stats, *dq, *dk, *dv;
      if (!tensor(CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, &s.q, &q) ||
          !tensor(CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, &s.k, &k) ||
          !tensor(CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, &s.v, &v) ||
          !tensor(CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, &s.o, &o) ||
          !tensor(CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, &s.d_o, &d_o) ||
          !tensor(CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, &s.stats, &stats) ||
          !tensor(CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, &s.d_q, &dq) ||
          !tensor(CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, &s.d_k, &dk) ||
          !tensor(CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, &s.d_v, &dv) ||
          !scale_of(CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, &s.attn_scale)) {
        return bad("SDPA_BWD: a tensor without descriptor or pointer");
      }
      s.batch = s.q.dims[0], s.heads = s.q.dims[1], s.s_q = s.q.dims[2], s.s_kv = s.k.dims[2], s.head_dim = s.q.dims[3];
      call.q = q, call.k = k, call.v = v, call.o = o, call.d_o = d_o, call.stats = static_cast<const float*>(stats);
      call.d_q = dq, call.d_k = dk, call.d_v = dv;
      interpret_sdpa_backward(call);
    } else {
      return bad("executing an operation the fake does not run");
    }
  } catch (const std::exception& e) {
    return bad(e.what());
  }
  ++counters().executions;
  counters().last_engine = config->engine;
  counters().last_workspace = values<void*>(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE)[0];
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
