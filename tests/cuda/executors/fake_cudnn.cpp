#include "fake_cudnn.h"

#include <cudnn.h>

#include <array>
#include <cstring>
#include <exception>
#include <map>
#include <vector>

#include "backend/cuda/calls/sdpa_interpreter.h"

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
    default:
      return 0;
  }
}

// The attribute type cuDNN documents for each attribute SdpaExecutor may set.
bool expected_type(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t* type) {
  switch (name) {
    case CUDNN_ATTR_TENSOR_DATA_TYPE:
      *type = CUDNN_TYPE_DATA_TYPE;
      return true;
    case CUDNN_ATTR_TENSOR_DIMENSIONS:
    case CUDNN_ATTR_TENSOR_STRIDES:
    case CUDNN_ATTR_TENSOR_UNIQUE_ID:
    case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT:
    case CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS:
      *type = CUDNN_TYPE_INT64;
      return true;
    case CUDNN_ATTR_TENSOR_IS_BY_VALUE:
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

}  // namespace

Counters& counters() {
  static Counters c;
  return c;
}
int64_t plan_workspace_bytes = 0;
void set_plan_workspace_bytes(int64_t bytes) { plan_workspace_bytes = bytes; }
int64_t refused_query_rows = 0;
void set_refused_query_rows(int64_t s_q) { refused_query_rows = s_q; }
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
      break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
      complete = has(d, {CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_ATTR_OPERATIONGRAPH_HANDLE});
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
    *count = d.engine == 0 ? 1 : 0;
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
  const Descriptor* op = child(*config->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS);
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
    if (op->type == CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR) {
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
