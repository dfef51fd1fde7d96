// What NVIDIA's cudnn-frontend builds for sdpa_backward without mask, bias, dropout, sink or ragged layout
// (include/cudnn_frontend/node/scaled_dot_product_flash_attention.h, CompositeSDPABackwardNode::expand_node, as of
// cuDNN 9.16 to 9.20), transcribed independently of src/backend/cuda/sdpa_executor.cpp so that the fake cuDNN can
// hold the executor's composite graph to it: each operation in order with its name, kind and mode, and each operand's
// role, data type, dimensions, strides and whether it is virtual. The frontend's intermediate and compute type is
// fp32; P and dS are given Q's type where they are transposed for the dV and dK matmuls; K and V enter transposed.
// dp_workspace: the variant the frontend takes for is_deterministic_algorithm (use_dp_workspace: dQ straight from the
// matmul); otherwise dQ accumulates in a non-virtual fp32 dQ_accum (in the workspace, zeroed by the frontend before
// each execution for cuDNN before 9.6) that an identity op copies to dQ.
#pragma once

#include <cudnn.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace vitpipe::fake_cudnn {

struct ExpectedTensor {
  std::string role;  // a caller tensor ("Q", "K^T", ...), a by-value scalar, or the op output it names ("exp_s")
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::array<int64_t, 4> dims{};
  std::optional<std::array<int64_t, 4>> strides;  // fixed by the frontend (virtual and workspace tensors)
  bool is_virtual = false;
  bool by_value = false;
  // None anywhere in the current frontend (its predecessors for cuDNN 8.9-9.5 reordered dQ_accum F16x16).
  cudnnBackendTensorReordering_t reordering = CUDNN_TENSOR_REORDERING_NONE;
};

struct ExpectedOperation {
  std::string name;
  cudnnBackendDescriptorType_t kind;
  cudnnPointwiseMode_t mode = CUDNN_POINTWISE_ADD;  // pointwise operations only
  std::vector<ExpectedTensor> operands;             // pointwise X[, B], Y; matmul A, B, C; reduction X, Y; reshape X, Y
};

// b, h, s_q, s_kv, d from Q and K; `io`: Q's data type (the caller's tensors'); strides of caller tensors are the
// caller's (only the unit feature stride is required of them, checked by the fake).
inline std::vector<ExpectedOperation> frontend_sdpa_backward(int64_t b, int64_t h, int64_t sq, int64_t skv, int64_t d,
                                                             cudnnDataType_t io, bool dp_workspace) {
  using Dims = std::array<int64_t, 4>;
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  const Dims scores = {b, h, sq, skv}, scores_stride = {h * sq * skv, sq * skv, skv, 1};
  const Dims scores_t = {b, h, skv, sq}, scores_t_stride = {h * sq * skv, sq * skv, 1, skv};
  const Dims rows = {b, h, sq, 1}, rows_stride = {h * sq, sq, 1, 1};
  const auto caller = [&](const char* role, Dims dims, cudnnDataType_t type) {
    return ExpectedTensor{role, type, dims, std::nullopt, false, false};
  };
  const auto virt = [&](const char* role, cudnnDataType_t type, Dims dims, Dims strides) {
    return ExpectedTensor{role, type, dims, strides, true, false};
  };
  const auto scalar = [&](const char* role) {
    return ExpectedTensor{role, f32, {1, 1, 1, 1}, Dims{1, 1, 1, 1}, false, true};
  };
  const ExpectedTensor q = caller("Q", {b, h, sq, d}, io), k_t = caller("K^T", {b, h, d, skv}, io);
  const ExpectedTensor v_t = caller("V^T", {b, h, d, skv}, io), o = caller("O", {b, h, sq, d}, io);
  const ExpectedTensor d_o = caller("dO", {b, h, sq, d}, io), stats = caller("Stats", rows, f32);
  const ExpectedTensor d_q = caller("dQ", {b, h, sq, d}, io), d_k = caller("dK", {b, h, skv, d}, io);
  const ExpectedTensor d_v = caller("dV", {b, h, skv, d}, io);
  const ExpectedTensor scale = scalar("attn_scale"), one = scalar("one");
  const ExpectedTensor softmax_sum{"softmax_sum", f32, rows, rows_stride, false, false};
  const auto pw = [](const char* name, cudnnPointwiseMode_t mode, std::vector<ExpectedTensor> operands) {
    return ExpectedOperation{name, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, mode, std::move(operands)};
  };
  const auto op = [](const char* name, cudnnBackendDescriptorType_t kind, std::vector<ExpectedTensor> operands) {
    return ExpectedOperation{name, kind, CUDNN_POINTWISE_ADD, std::move(operands)};
  };
  constexpr auto kMatmul = CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR;
  constexpr auto kReduction = CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR;
  constexpr auto kReshape = CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR;

  const ExpectedTensor mul_do_o = virt("mul_dO_O", f32, {b, h, sq, d}, {h * sq * d, sq * d, h * d, 1});
  const ExpectedTensor reduce_do_o = virt("reduce_dO_o", f32, rows, rows_stride);
  const ExpectedTensor s = virt("matmul_Q_KT", f32, scores, scores_stride);
  const ExpectedTensor s_scaled = virt("mul_s_attn_scale", f32, scores, scores_stride);
  const ExpectedTensor s_shifted = virt("sub_s_m", f32, scores, scores_stride);
  const ExpectedTensor p = virt("exp_s", f32, scores, scores_stride);
  const ExpectedTensor p_t = virt("reshape_p", io, scores_t, scores_t_stride);
  const ExpectedTensor dp = virt("matmul_dO_VT", f32, scores, scores_stride);
  const ExpectedTensor dp_centred = virt("sub_dP_softmax_sum", f32, scores, scores_stride);
  const ExpectedTensor ds_unscaled = virt("mul_dP_exp_s", f32, scores, scores_stride);
  const ExpectedTensor ds = virt("mul_dS_attn_scale", f32, scores, scores_stride);
  const ExpectedTensor ds_t = virt("reshape_dS", io, scores_t, scores_t_stride);
  // reshape_k's output: K back from K^T, with K's strides, fp32 (unset, so the context's intermediate type).
  const ExpectedTensor k{"reshape_k", f32, {b, h, skv, d}, std::nullopt, true, false};

  std::vector<ExpectedOperation> ops = {
      pw("mul_dO_O", CUDNN_POINTWISE_MUL, {d_o, o, mul_do_o}),
      op("reduce_dO_o", kReduction, {mul_do_o, reduce_do_o}),
      pw("scale_dropout_inv", CUDNN_POINTWISE_MUL, {reduce_do_o, one, softmax_sum}),
      op("matmul_Q_KT", kMatmul, {q, k_t, s}),
      pw("mul_s_attn_scale", CUDNN_POINTWISE_MUL, {s, scale, s_scaled}),
      pw("sub_s_m", CUDNN_POINTWISE_SUB, {s_scaled, stats, s_shifted}),
      pw("exp_s", CUDNN_POINTWISE_EXP, {s_shifted, p}),
      op("reshape_p", kReshape, {p, p_t}),
      op("matmul_pT_dO", kMatmul, {p_t, d_o, d_v}),
      op("matmul_dO_VT", kMatmul, {d_o, v_t, dp}),
      pw("sub_dP_softmax_sum", CUDNN_POINTWISE_SUB, {dp, softmax_sum, dp_centred}),
      pw("mul_dP_exp_s", CUDNN_POINTWISE_MUL, {dp_centred, p, ds_unscaled}),
      pw("mul_dS_attn_scale", CUDNN_POINTWISE_MUL, {ds_unscaled, scale, ds}),
      op("reshape_dS", kReshape, {ds, ds_t}),
      op("matmul_dST_Q", kMatmul, {ds_t, q, d_k}),
      op("reshape_k", kReshape, {k_t, k}),
  };
  if (dp_workspace) {
    ops.push_back(op("matmul_dS_K", kMatmul, {ds, k, d_q}));
  } else {
    // Zeroed before execution: the frontend's memset workspace modification before cuDNN 9.6.
    const ExpectedTensor accumulator{"dQ_accum", f32, {b, h, sq, d}, Dims{h * sq * d, sq * d, d, 1}, false, false};
    ops.push_back(op("matmul_dS_K", kMatmul, {ds, k, accumulator}));
    ops.push_back(pw("identity_dQ", CUDNN_POINTWISE_IDENTITY, {accumulator, d_q}));
  }
  return ops;
}

}  // namespace vitpipe::fake_cudnn
