#include "backend/cuda/calls/linear_gemm_calls.h"

#include <cstdio>
#include <stdexcept>
#include <string>

#include "backend/cuda/calls/padded_rows.h"

namespace vitpipe::cuda {
namespace {

void require(bool ok, const char* what, const std::string& message) {
  if (!ok) throw std::invalid_argument(std::string(what) + ": " + message);
}

std::string dims(const RowMajorMatrix& x) {
  char text[48];
  std::snprintf(text, sizeof text, "[%lld, %lld]", static_cast<long long>(x.rows), static_cast<long long>(x.cols));
  return text;
}

// The column-major view of a contiguous row-major [rows, cols] matrix: [cols, rows] with leading dimension cols.
MatrixLayout column_major_view(const RowMajorMatrix& x) { return {x.type, x.cols, x.rows, x.stride()}; }

// --allow-tf32 is one switch for every GEMM; TF32 exists for f32 operands only (cuBLASLt refuses it for bf16).
bool tf32_for(bool allow_tf32, ElementType operands) { return allow_tf32 && operands == ElementType::f32; }

}  // namespace

GemmCall linear_forward_gemm(const RowMajorMatrix& in, const RowMajorMatrix& weight, const BiasVector& bias,
                             const RowMajorMatrix* residual, const RowMajorMatrix& out, bool allow_tf32) {
  const char* what = "linear_forward";
  require(in.cols == weight.cols && out.rows == in.rows && out.cols == weight.rows, what,
          "in " + dims(in) + ", weight " + dims(weight) + ", out " + dims(out) + " do not fit");
  require(in.type == weight.type, what, "in and weight must share a type");
  require_padded_rows(what, "in", in);
  require_padded_rows(what, "weight", weight);
  require_padded_rows(what, "out", out);
  if (residual != nullptr) require_padded_rows(what, "residual", *residual);
  GemmCall call;
  call.what = what;
  GemmShape& s = call.shape;
  s.trans_a = Transpose::transpose, s.trans_b = Transpose::none;
  s.m = weight.rows, s.n = in.rows, s.k = in.cols;
  s.a = column_major_view(weight);  // [K, N]: op(A) = its transpose, W [N, K]
  s.b = column_major_view(in);      // [K, M] = in^T
  s.d = column_major_view(out);     // [N, M] = out^T
  s.c = s.d;
  s.allow_tf32 = tf32_for(allow_tf32, s.a.type);
  call.data.a = weight.data, call.data.b = in.data, call.data.d = out.data;
  if (residual != nullptr) {
    require(residual->rows == out.rows && residual->cols == out.cols, what, "residual must be shaped as out");
    require(residual->type == out.type, what,
            "the residual (C) and out (D) must share a type: cuBLASLt's Ctype equals its Dtype");
    s.beta = 1.0f;
    s.c = column_major_view(*residual);
    call.data.c = residual->data;
  }
  if (bias.data != nullptr) {
    require(bias.type == out.type, what, "the bias must be of out's type (cublasLt.h: bias elements are Dtype)");
    s.epilogue = GemmEpilogue::bias;  // bias[i] over the m = N rows of D: one per output feature
    s.bias_type = bias.type;
    call.data.bias = const_cast<void*>(bias.data);  // cuBLASLt's one bias pointer is read-only under _BIAS
  }
  return call;
}

GemmCall linear_backward_input_gemm(const RowMajorMatrix& grad_out, const RowMajorMatrix& weight,
                                    const RowMajorMatrix& grad_in, bool allow_tf32) {
  const char* what = "linear_backward_input";
  require(grad_out.cols == weight.rows && grad_in.rows == grad_out.rows && grad_in.cols == weight.cols, what,
          "grad_out " + dims(grad_out) + ", weight " + dims(weight) + ", grad_in " + dims(grad_in) + " do not fit");
  require(grad_out.type == weight.type, what, "grad_out and weight must share a type");
  require_padded_rows(what, "grad_out", grad_out);
  require_padded_rows(what, "weight", weight);
  require_padded_rows(what, "grad_in", grad_in);
  GemmCall call;
  call.what = what;
  GemmShape& s = call.shape;
  s.trans_a = Transpose::none, s.trans_b = Transpose::none;
  s.m = weight.cols, s.n = grad_out.rows, s.k = weight.rows;
  s.a = column_major_view(weight);    // [K, N] = W^T
  s.b = column_major_view(grad_out);  // [N, M] = grad_out^T
  s.d = column_major_view(grad_in);   // [K, M] = grad_in^T
  s.c = s.d;
  s.allow_tf32 = tf32_for(allow_tf32, s.a.type);
  call.data.a = weight.data, call.data.b = grad_out.data, call.data.d = grad_in.data;
  return call;
}

LinearWeightGradientCalls linear_backward_weight_gemm(const RowMajorMatrix& grad_out, const RowMajorMatrix& in,
                                                      const RowMajorMatrix& grad_weight, float* grad_bias,
                                                      float* bias_scratch, bool allow_tf32) {
  const char* what = "linear_backward_weight";
  require(grad_out.rows == in.rows && grad_weight.rows == grad_out.cols && grad_weight.cols == in.cols, what,
          "grad_out " + dims(grad_out) + ", in " + dims(in) + ", grad_weight " + dims(grad_weight) + " do not fit");
  require(grad_out.type == in.type, what, "grad_out and in must share a type");
  require(grad_weight.type == ElementType::f32, what, "grad_weight must be f32");
  require_padded_rows(what, "grad_out", grad_out);
  require_padded_rows(what, "in", in);
  require_padded_rows(what, "grad_weight", grad_weight);
  LinearWeightGradientCalls calls;
  GemmCall& call = calls.gemm;
  call.what = what;
  GemmShape& s = call.shape;
  s.trans_a = Transpose::none, s.trans_b = Transpose::transpose;
  s.m = in.cols, s.n = grad_out.cols, s.k = in.rows;
  s.a = column_major_view(in);           // [K, M] = in^T
  s.b = column_major_view(grad_out);     // [N, M]: op(B) = its transpose, grad_out [M, N]
  s.d = column_major_view(grad_weight);  // [K, N] = grad_W^T
  s.c = s.d;
  s.beta = 1.0f;  // accumulate: C = D = grad_weight
  s.allow_tf32 = tf32_for(allow_tf32, s.a.type);
  call.data.a = in.data, call.data.b = grad_out.data, call.data.c = grad_weight.data, call.data.d = grad_weight.data;
  if (grad_bias != nullptr) {
    require(bias_scratch != nullptr && bias_scratch != grad_bias, what,
            "the bias gradient needs a scratch vector of its own: _BGRADB overwrites, gradients add");
    s.epilogue = GemmEpilogue::bias_gradient_b;  // column sums of op(B) = grad_out [M, N] over k = M
    s.bias_type = ElementType::f32;
    call.data.bias = bias_scratch;
    calls.bias_add = VectorAdd{bias_scratch, grad_bias, grad_out.cols};
  }
  return calls;
}

}  // namespace vitpipe::cuda
