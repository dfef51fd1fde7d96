#include "backend/cuda/calls/lora_gemm_calls.h"

#include "backend/cuda/calls/row_major_gemm.h"

namespace vitpipe::cuda {
namespace {

// Columns [column, column + n) of a [rows, ld] tensor.
RowMajorMatrix column_block(const RowMajorMatrix& wide, int64_t column, int64_t n) {
  RowMajorMatrix block = wide;
  block.data = static_cast<char*>(wide.data) + column * element_bytes(wide.type);
  block.cols = n;
  block.row_stride = wide.stride();
  return block;
}

RowMajorOperand plain(const RowMajorMatrix& m) { return {m, false}; }
RowMajorOperand transposed(const RowMajorMatrix& m) { return {m, true}; }

}  // namespace

std::vector<GemmCall> lora_forward_gemms(const RowMajorMatrix& in, const RowMajorMatrix& a, const RowMajorMatrix& b,
                                         float scale, const RowMajorMatrix& low, const RowMajorMatrix& out,
                                         int64_t column) {
  return {
      row_major_gemm("lora_forward: low", plain(in), transposed(a), low, scale, 0.0f),
      row_major_gemm("lora_forward: out", plain(low), transposed(b), column_block(out, column, b.rows), 1.0f, 1.0f)};
}

std::vector<GemmCall> lora_backward_gemms(const RowMajorMatrix& grad_out, int64_t column, const RowMajorMatrix& in,
                                          const RowMajorMatrix& a, const RowMajorMatrix& b, float scale,
                                          const RowMajorMatrix& low, const RowMajorMatrix& t,
                                          const RowMajorMatrix* grad_in, const RowMajorMatrix* grad_a,
                                          const RowMajorMatrix* grad_b) {
  const RowMajorMatrix g = column_block(grad_out, column, b.rows);
  std::vector<GemmCall> calls;
  if (grad_b != nullptr)
    calls.push_back(row_major_gemm("lora_backward: grad_b", transposed(g), plain(low), *grad_b, 1, 1));
  if (grad_a == nullptr && grad_in == nullptr) return calls;
  calls.push_back(row_major_gemm("lora_backward: t", plain(g), plain(b), t, scale, 0.0f));
  if (grad_a != nullptr)
    calls.push_back(row_major_gemm("lora_backward: grad_a", transposed(t), plain(in), *grad_a, 1, 1));
  if (grad_in != nullptr) calls.push_back(row_major_gemm("lora_backward: grad_in", plain(t), plain(a), *grad_in, 1, 1));
  return calls;
}

}  // namespace vitpipe::cuda
