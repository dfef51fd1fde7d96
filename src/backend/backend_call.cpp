#include "backend/backend_call.h"

#include <cstdio>
#include <exception>
#include <vector>

#include "util/error.h"

namespace vitpipe {

static_assert(
    static_cast<int>(DType::f32) == VITPIPE_DTYPE_F32 && static_cast<int>(DType::bf16) == VITPIPE_DTYPE_BF16 &&
        static_cast<int>(DType::f16) == VITPIPE_DTYPE_F16 && static_cast<int>(DType::f64) == VITPIPE_DTYPE_F64 &&
        static_cast<int>(DType::i64) == VITPIPE_DTYPE_I64 && static_cast<int>(DType::i32) == VITPIPE_DTYPE_I32 &&
        static_cast<int>(DType::u8) == VITPIPE_DTYPE_U8 && static_cast<int>(DType::boolean) == VITPIPE_DTYPE_BOOL &&
        static_cast<int>(DType::i16) == VITPIPE_DTYPE_I16 && static_cast<int>(DType::i8) == VITPIPE_DTYPE_I8,
    "module_abi.h's dtype codes are DType's values");
static_assert(sizeof(VitpipeOptimizerRun) == sizeof(OptimizerRun), "module_abi.h's run is backend.h's");

VitpipeTensorDesc describe_tensor(const Tensor& tensor, int32_t memory) {
  VitpipeTensorDesc d{};
  d.memory = memory;
  d.data = tensor.raw();
  d.dtype = static_cast<int32_t>(tensor.dtype());
  if (tensor.rank() == 0 && tensor.numel() == 0) {
    d.rank = VITPIPE_TENSOR_EMPTY;
    return d;
  }
  VP_REQUIRE(tensor.rank() <= VITPIPE_TENSOR_MAX_RANK, "CUDA module: a tensor of rank ", tensor.rank(), " (at most ",
             VITPIPE_TENSOR_MAX_RANK, ")");
  d.rank = static_cast<int32_t>(tensor.rank());
  for (int64_t i = 0; i < tensor.rank(); ++i) d.dims[i] = tensor.shape()[static_cast<size_t>(i)];
  return d;
}

VitpipeTensorDesc describe_optional(const Tensor* tensor) {
  if (tensor != nullptr) return describe_tensor(*tensor);
  VitpipeTensorDesc d{};
  d.rank = VITPIPE_TENSOR_ABSENT;
  return d;
}

BackendCallBuilder::BackendCallBuilder(int op) { call_.op = op; }

BackendCallBuilder& BackendCallBuilder::tensor(const Tensor& t) {
  VP_REQUIRE(call_.tensor_count < VITPIPE_CALL_MAX_TENSORS, "CUDA module: too many tensors for one call");
  note_device_side(t);
  call_.tensors[call_.tensor_count++] = describe_tensor(t);
  return *this;
}

void BackendCallBuilder::note_device_side(const Tensor& t) {
  if (first_host_tensor_ < 0 && t.numel() > 0 && t.device() == Device::cpu) first_host_tensor_ = call_.tensor_count;
}

BackendCallBuilder& BackendCallBuilder::host_tensor(const Tensor& t) {
  VP_REQUIRE(call_.tensor_count < VITPIPE_CALL_MAX_TENSORS, "CUDA module: too many tensors for one call");
  call_.tensors[call_.tensor_count++] = describe_tensor(t, VITPIPE_MEMORY_HOST);
  return *this;
}

VitpipeOptimizerRun to_c(const OptimizerRun& run) { return {run.begin, run.end, run.decay, run.step}; }

VitpipeOptimizerScalars to_c(const OptimizerScalars& s) {
  VitpipeOptimizerScalars c{};
  c.beta1 = s.beta1;
  c.one_minus_beta1 = s.one_minus_beta1;
  c.beta2 = s.beta2;
  c.one_minus_beta2 = s.one_minus_beta2;
  c.bias_correction1 = s.bias_correction1;
  c.bias_correction2 = s.bias_correction2;
  c.bias_correction2_sqrt = s.bias_correction2_sqrt;
  c.eps = s.eps;
  c.momentum = s.momentum;
  c.one_minus_dampening = s.one_minus_dampening;
  c.first_step = s.first_step ? 1 : 0;
  c.nesterov = s.nesterov ? 1 : 0;
  return c;
}

OptimizerScalars from_c(const VitpipeOptimizerScalars& c) {
  OptimizerScalars s;
  s.beta1 = c.beta1;
  s.one_minus_beta1 = c.one_minus_beta1;
  s.beta2 = c.beta2;
  s.one_minus_beta2 = c.one_minus_beta2;
  s.bias_correction1 = c.bias_correction1;
  s.bias_correction2 = c.bias_correction2;
  s.bias_correction2_sqrt = c.bias_correction2_sqrt;
  s.eps = c.eps;
  s.momentum = c.momentum;
  s.one_minus_dampening = c.one_minus_dampening;
  s.first_step = c.first_step != 0;
  s.nesterov = c.nesterov != 0;
  return s;
}

BackendCallBuilder& BackendCallBuilder::optimizer_step(const OptimizerStep& step, const OptimizerScalars& s) {
  tensor(step.params).tensor(step.grads).tensor(step.exp_avg).tensor(step.exp_avg_sq);
  runs_.clear();
  runs_.reserve(step.runs.size());
  for (const OptimizerRun& r : step.runs) runs_.push_back(to_c(r));
  call_.runs = runs_.empty() ? nullptr : runs_.data();
  call_.run_count = static_cast<int64_t>(runs_.size());
  call_.work_items = step.work_items.empty() ? nullptr : step.work_items.data();
  call_.work_item_count = static_cast<int64_t>(step.work_items.size());
  call_.optimizer = to_c(s);
  return *this;
}

BackendCallBuilder& BackendCallBuilder::squares(std::span<double> out) {
  call_.squares = out.empty() ? nullptr : out.data();
  call_.square_count = static_cast<int64_t>(out.size());
  return *this;
}

BackendCallBuilder& BackendCallBuilder::bounds(std::span<const int64_t> bounds) {
  call_.bounds = bounds.empty() ? nullptr : bounds.data();
  call_.bound_count = static_cast<int64_t>(bounds.size());
  return *this;
}

BackendCallBuilder& BackendCallBuilder::optional(const Tensor* t) {
  VP_REQUIRE(call_.tensor_count < VITPIPE_CALL_MAX_TENSORS, "CUDA module: too many tensors for one call");
  if (t != nullptr) note_device_side(*t);
  call_.tensors[call_.tensor_count++] = describe_optional(t);
  return *this;
}

BackendCallBuilder& BackendCallBuilder::scalar(double value) {
  VP_REQUIRE(scalars_ < 2, "CUDA module: too many scalars for one call");
  call_.scalars[scalars_++] = value;
  return *this;
}

BackendCallBuilder& BackendCallBuilder::integer(int64_t value) {
  VP_REQUIRE(integers_ < 2, "CUDA module: too many integers for one call");
  call_.ints[integers_++] = value;
  return *this;
}

std::string backend_op_name(int op) {
  static const char* const names[] = {nullptr,
                                      "linear_forward",
                                      "linear_gelu_forward",
                                      "linear_backward_input",
                                      "linear_backward_weight",
                                      "bias_backward",
                                      "layernorm_forward",
                                      "layernorm_backward",
                                      "attention_forward",
                                      "attention_backward",
                                      "cls_attention_forward",
                                      "cls_attention_backward",
                                      "gelu_forward",
                                      "gelu_backward",
                                      "patchify",
                                      "embeddings_forward",
                                      "embeddings_backward",
                                      "gather_cls",
                                      "scatter_cls",
                                      "bce_with_logits",
                                      "cross_entropy",
                                      "convert",
                                      "scale",
                                      "token_embeddings_forward",
                                      "token_embeddings_backward",
                                      "resample_positions_forward",
                                      "resample_positions_backward",
                                      "layer_scale_forward",
                                      "layer_scale_backward",
                                      "swiglu_forward",
                                      "swiglu_backward",
                                      "gather_tokens",
                                      "scatter_tokens",
                                      "cls_and_mean_forward",
                                      "cls_and_mean_backward",
                                      "lora_forward",
                                      "lora_backward",
                                      "adamw_update",
                                      "lamb_moments",
                                      "lamb_update",
                                      "sgd_update",
                                      "sum_of_squares",
                                      "zero",
                                      "copy_to_host",
                                      "copy_from_host"};
  static_assert(sizeof names / sizeof names[0] == VITPIPE_OP_COUNT_PLUS_ONE, "one name per op code");
  if (op > 0 && op < VITPIPE_OP_COUNT_PLUS_ONE) return names[op];
  return "op " + std::to_string(op);
}

namespace {

// The call's tensors as Tensors over the same memory; absent ones have no Tensor (pointer() is null).
class Unpacked {
 public:
  // `host_index`: the one tensor that must be host memory (copy_to_host / copy_from_host), -1 for none; every other
  // tensor must say device memory.
  Unpacked(const VitpipeBackendCall& call, int expected, int host_index = -1) : call_(call) {
    VP_REQUIRE(call.tensor_count == expected, "expects ", expected, " tensors, the call has ", call.tensor_count);
    for (int i = 0; i < expected; ++i) {
      const VitpipeTensorDesc& d = call.tensors[i];
      const int32_t memory = i == host_index ? VITPIPE_MEMORY_HOST : VITPIPE_MEMORY_DEVICE;
      VP_REQUIRE(d.memory == memory, "tensor ", i, " must be ", memory == VITPIPE_MEMORY_HOST ? "host" : "device",
                 " memory, its descriptor says memory ", d.memory);
      if (d.rank == VITPIPE_TENSOR_ABSENT) {
        present_[i] = false;
        continue;
      }
      present_[i] = true;
      if (d.rank == VITPIPE_TENSOR_EMPTY) continue;  // Tensor()
      VP_REQUIRE(d.rank >= 0 && d.rank <= VITPIPE_TENSOR_MAX_RANK, "tensor ", i, ": rank ", d.rank);
      VP_REQUIRE(d.dtype >= VITPIPE_DTYPE_F32 && d.dtype <= VITPIPE_DTYPE_I8, "tensor ", i, ": dtype code ", d.dtype);
      Shape shape(d.dims, d.dims + d.rank);
      tensors_[i] = Tensor::wrap(d.data, shape, static_cast<DType>(d.dtype));
    }
  }
  const Tensor& operator[](int i) const {
    VP_REQUIRE(present_[i], "tensor ", i, " is required but absent");
    return tensors_[i];
  }
  const Tensor* pointer(int i) const { return present_[i] ? &tensors_[i] : nullptr; }
  double scalar(int i) const { return call_.scalars[i]; }
  int64_t integer(int i) const { return call_.ints[i]; }

 private:
  const VitpipeBackendCall& call_;
  Tensor tensors_[VITPIPE_CALL_MAX_TENSORS];
  bool present_[VITPIPE_CALL_MAX_TENSORS] = {};
};

template <class T>
std::span<T> host_array(T* data, int64_t count, const char* what) {
  VP_REQUIRE(count >= 0 && (count == 0 || data != nullptr), what, ": ", count, " entries at a null pointer");
  return count == 0 ? std::span<T>() : std::span<T>(data, static_cast<size_t>(count));
}

// An optimizer call's step: tensors 0..3 and the host arrays (runs converted into `runs`, which must outlive it).
OptimizerStep unpack_step(const VitpipeBackendCall& call, const Unpacked& t, std::vector<OptimizerRun>& runs) {
  runs.clear();
  for (const VitpipeOptimizerRun& r : host_array(call.runs, call.run_count, "runs")) {
    OptimizerRun run;
    run.begin = r.begin;
    run.end = r.end;
    run.decay = r.decay;
    run.step = r.step;
    runs.push_back(run);
  }
  OptimizerStep step;
  step.params = t[0];
  step.grads = t[1];
  step.exp_avg = t[2];
  step.exp_avg_sq = t[3];
  step.runs = runs;
  step.work_items = host_array(call.work_items, call.work_item_count, "work_items");
  return step;
}

}  // namespace

void run_backend_call(Backend& backend, VitpipeBackendCall& call) {
  Backend& b = backend;
  switch (call.op) {
    case VITPIPE_OP_LINEAR_FORWARD: {
      Unpacked t(call, 5);
      b.linear_forward(t[0], t[1], t.pointer(2), t.pointer(3), t[4]);
      return;
    }
    case VITPIPE_OP_LINEAR_GELU_FORWARD: {
      Unpacked t(call, 5);
      b.linear_gelu_forward(t[0], t[1], t[2], t.pointer(3), t[4]);
      return;
    }
    case VITPIPE_OP_LINEAR_BACKWARD_INPUT: {
      Unpacked t(call, 3);
      b.linear_backward_input(t[0], t[1], t[2]);
      return;
    }
    case VITPIPE_OP_LINEAR_BACKWARD_WEIGHT: {
      Unpacked t(call, 3);
      b.linear_backward_weight(t[0], t[1], t[2]);
      return;
    }
    case VITPIPE_OP_BIAS_BACKWARD: {
      Unpacked t(call, 2);
      b.bias_backward(t[0], t[1]);
      return;
    }
    case VITPIPE_OP_LAYERNORM_FORWARD: {
      Unpacked t(call, 6);
      b.layernorm_forward(t[0], t[1], t[2], t.scalar(0), t[3], t[4], t[5]);
      return;
    }
    case VITPIPE_OP_LAYERNORM_BACKWARD: {
      Unpacked t(call, 11);
      LayerNormBackwardArgs a;
      a.grad_out = t[0];
      a.in = t[1];
      a.weight = t[2];
      a.mean = t[3];
      a.rstd = t[4];
      a.grad_in = t[5];
      a.grad_residual = t[6];
      a.grad_weight = t[7];
      a.grad_bias = t[8];
      a.grad_in_copy = t[9];
      a.grad_in_colsum = t[10];
      b.layernorm_backward(a);
      return;
    }
    case VITPIPE_OP_ATTENTION_FORWARD: {
      Unpacked t(call, 3);
      b.attention_forward(t[0], t.integer(0), t[1], t[2]);
      return;
    }
    case VITPIPE_OP_ATTENTION_BACKWARD: {
      Unpacked t(call, 6);
      b.attention_backward(t[0], t[1], t[2], t[3], t.integer(0), t[4], t.pointer(5));
      return;
    }
    case VITPIPE_OP_CLS_ATTENTION_FORWARD: {
      Unpacked t(call, 3);
      b.cls_attention_forward(t[0], t.integer(0), t[1], t[2]);
      return;
    }
    case VITPIPE_OP_CLS_ATTENTION_BACKWARD: {
      Unpacked t(call, 6);
      b.cls_attention_backward(t[0], t[1], t[2], t[3], t.integer(0), t[4], t.pointer(5));
      return;
    }
    case VITPIPE_OP_GELU_FORWARD: {
      Unpacked t(call, 2);
      b.gelu_forward(t[0], t[1]);
      return;
    }
    case VITPIPE_OP_GELU_BACKWARD: {
      Unpacked t(call, 4);
      b.gelu_backward(t[0], t[1], t[2], t.pointer(3));
      return;
    }
    case VITPIPE_OP_PATCHIFY: {
      Unpacked t(call, 2);
      b.patchify(t[0], t.integer(0), t[1]);
      return;
    }
    case VITPIPE_OP_EMBEDDINGS_FORWARD: {
      Unpacked t(call, 4);
      b.embeddings_forward(t[0], t[1], t[2], t[3]);
      return;
    }
    case VITPIPE_OP_EMBEDDINGS_BACKWARD: {
      Unpacked t(call, 5);
      b.embeddings_backward(t[0], t[1], t[2], t[3], t.pointer(4));
      return;
    }
    case VITPIPE_OP_GATHER_CLS: {
      Unpacked t(call, 2);
      b.gather_cls(t[0], t[1]);
      return;
    }
    case VITPIPE_OP_SCATTER_CLS: {
      Unpacked t(call, 2);
      b.scatter_cls(t[0], t[1]);
      return;
    }
    case VITPIPE_OP_BCE_WITH_LOGITS: {
      Unpacked t(call, 5);
      call.result = b.bce_with_logits(t[0], t[1], t.pointer(2), t.pointer(3), t.scalar(0), t[4]);
      return;
    }
    case VITPIPE_OP_CROSS_ENTROPY: {
      Unpacked t(call, 3);
      call.result = b.cross_entropy(t[0], t[1], t.scalar(0), t[2]);
      return;
    }
    case VITPIPE_OP_CONVERT: {
      Unpacked t(call, 2);
      b.convert(t[0], t[1]);
      return;
    }
    case VITPIPE_OP_SCALE: {
      Unpacked t(call, 2);
      b.scale(t[0], t.scalar(0), t[1]);
      return;
    }
    case VITPIPE_OP_TOKEN_EMBEDDINGS_FORWARD: {
      Unpacked t(call, 4);
      b.token_embeddings_forward(t[0], t[1], t.integer(0), t[2], t[3]);
      return;
    }
    case VITPIPE_OP_TOKEN_EMBEDDINGS_BACKWARD: {
      Unpacked t(call, 5);
      b.token_embeddings_backward(t[0], t.pointer(1), t.integer(0), t.pointer(2), t[3], t.pointer(4));
      return;
    }
    case VITPIPE_OP_RESAMPLE_POSITIONS_FORWARD: {
      Unpacked t(call, 4);
      b.resample_positions_forward(t[0], t.integer(0), t[1], t[2], t[3]);
      return;
    }
    case VITPIPE_OP_RESAMPLE_POSITIONS_BACKWARD: {
      Unpacked t(call, 4);
      b.resample_positions_backward(t[0], t.integer(0), t[1], t[2], t[3]);
      return;
    }
    case VITPIPE_OP_LAYER_SCALE_FORWARD: {
      Unpacked t(call, 4);
      b.layer_scale_forward(t[0], t[1], t[2], t[3]);
      return;
    }
    case VITPIPE_OP_LAYER_SCALE_BACKWARD: {
      Unpacked t(call, 6);
      b.layer_scale_backward(t[0], t[1], t[2], t[3], t.pointer(4), t.pointer(5));
      return;
    }
    case VITPIPE_OP_SWIGLU_FORWARD: {
      Unpacked t(call, 2);
      b.swiglu_forward(t[0], t[1]);
      return;
    }
    case VITPIPE_OP_SWIGLU_BACKWARD: {
      Unpacked t(call, 4);
      b.swiglu_backward(t[0], t[1], t[2], t.pointer(3));
      return;
    }
    case VITPIPE_OP_GATHER_TOKENS: {
      Unpacked t(call, 2);
      b.gather_tokens(t[0], t.integer(0), t[1]);
      return;
    }
    case VITPIPE_OP_SCATTER_TOKENS: {
      Unpacked t(call, 2);
      b.scatter_tokens(t[0], t[1]);
      return;
    }
    case VITPIPE_OP_CLS_AND_MEAN_FORWARD: {
      Unpacked t(call, 2);
      b.cls_and_mean_forward(t[0], t.integer(0), t[1]);
      return;
    }
    case VITPIPE_OP_CLS_AND_MEAN_BACKWARD: {
      Unpacked t(call, 2);
      b.cls_and_mean_backward(t[0], t.integer(0), t[1]);
      return;
    }
    case VITPIPE_OP_LORA_FORWARD: {
      Unpacked t(call, 5);
      b.lora_forward(t[0], t[1], t[2], t.scalar(0), t[3], t[4], t.integer(0));
      return;
    }
    case VITPIPE_OP_LORA_BACKWARD: {
      Unpacked t(call, 8);
      b.lora_backward(t[0], t.integer(0), t[1], t[2], t[3], t.scalar(0), t[4], t.pointer(5), t.pointer(6),
                      t.pointer(7));
      return;
    }
    case VITPIPE_OP_ADAMW_UPDATE:
    case VITPIPE_OP_LAMB_UPDATE:
    case VITPIPE_OP_SGD_UPDATE:
    case VITPIPE_OP_LAMB_MOMENTS: {
      Unpacked t(call, 4);
      std::vector<OptimizerRun> runs;
      const OptimizerStep step = unpack_step(call, t, runs);
      const OptimizerScalars s = from_c(call.optimizer);
      if (call.op == VITPIPE_OP_ADAMW_UPDATE) {
        b.adamw_update(step, s);
      } else if (call.op == VITPIPE_OP_LAMB_UPDATE) {
        b.lamb_update(step, s);
      } else if (call.op == VITPIPE_OP_SGD_UPDATE) {
        b.sgd_update(step, s);
      } else {
        b.lamb_moments(step, s, host_array(call.squares, call.square_count, "squares"));
      }
      return;
    }
    case VITPIPE_OP_SUM_OF_SQUARES: {
      Unpacked t(call, 1);
      call.result = b.sum_of_squares(t[0], host_array(call.bounds, call.bound_count, "bounds"));
      return;
    }
    case VITPIPE_OP_ZERO: {
      Unpacked t(call, 1);
      b.zero(t[0]);
      return;
    }
    case VITPIPE_OP_COPY_TO_HOST: {
      Unpacked t(call, 2, 1);  // (device, host)
      b.copy_to_host(t[0], t[1]);
      return;
    }
    case VITPIPE_OP_COPY_FROM_HOST: {
      Unpacked t(call, 2, 0);  // (host, device)
      b.copy_from_host(t[0], t[1]);
      return;
    }
    default:
      fail("unknown op code ", call.op);
  }
}

int run_backend_call_reporting(Backend& backend, VitpipeBackendCall* call, char* error, size_t error_size) {
  try {
    if (call == nullptr) fail("null call");
    run_backend_call(backend, *call);
    return 0;
  } catch (const std::exception& e) {
    if (error != nullptr && error_size > 0) {
      std::snprintf(error, error_size, "%s: %s", backend_op_name(call != nullptr ? call->op : 0).c_str(), e.what());
    }
    return 1;
  }
}

}  // namespace vitpipe
