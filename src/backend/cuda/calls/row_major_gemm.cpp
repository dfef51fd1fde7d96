#include "backend/cuda/calls/row_major_gemm.h"

#include <stdexcept>
#include <string>

#include "backend/cuda/calls/padded_rows.h"

namespace vitpipe::cuda {
namespace {

// op(M)'s rows and columns.
int64_t op_rows(const RowMajorOperand& o) { return o.transposed ? o.matrix.cols : o.matrix.rows; }
int64_t op_cols(const RowMajorOperand& o) { return o.transposed ? o.matrix.rows : o.matrix.cols; }

MatrixLayout column_major_view(const RowMajorMatrix& x) { return {x.type, x.cols, x.rows, x.stride()}; }

}  // namespace

GemmCall row_major_gemm(const char* what, const RowMajorOperand& x, const RowMajorOperand& y, const RowMajorMatrix& out,
                        float alpha, float beta) {
  const int64_t m = op_rows(x), k = op_cols(x), n = op_cols(y);
  if (op_rows(y) != k || out.rows != m || out.cols != n) {
    throw std::invalid_argument(std::string(what) + ": op(X) [" + std::to_string(m) + ", " + std::to_string(k) +
                                "] . op(Y) [" + std::to_string(op_rows(y)) + ", " + std::to_string(n) + "] -> [" +
                                std::to_string(out.rows) + ", " + std::to_string(out.cols) + "] do not fit");
  }
  if (x.matrix.type != y.matrix.type) throw std::invalid_argument(std::string(what) + ": X and Y must share a type");
  require_padded_rows(what, "X", x.matrix);
  require_padded_rows(what, "Y", y.matrix);
  require_padded_rows(what, "the output", out);
  GemmCall call;
  call.what = what;
  GemmShape& s = call.shape;
  // A must be op(Y)^T [N, K]. Y's column-major view is Y_stored^T: for a plain Y ([K, N]) that is op(Y)^T already
  // (op N); for a transposed Y (stored [N, K]) it is op(Y), so op T. B = X with op(B) = op(X)^T likewise.
  s.trans_a = y.transposed ? Transpose::transpose : Transpose::none;
  s.trans_b = x.transposed ? Transpose::transpose : Transpose::none;
  s.m = n, s.n = m, s.k = k;
  s.a = column_major_view(y.matrix);
  s.b = column_major_view(x.matrix);
  s.d = column_major_view(out);
  s.c = s.d;
  s.alpha = alpha, s.beta = beta;
  call.data.a = y.matrix.data, call.data.b = x.matrix.data, call.data.d = out.data;
  if (beta != 0.0f) call.data.c = out.data;
  return call;
}

}  // namespace vitpipe::cuda
