// fc1 with its bias and the exact (erf) GELU. Inference keeps only GELU(x): oneDNN's eltwise_gelu_erf post-op in
// the GEMM's epilogue. Training also keeps the pre-activation x for the backward pass, which a post-op cannot
// write; there each thread runs the GEMM on its own blocks of rows (single-threaded oneDNN, bias in the epilogue)
// and applies GELU to each block while it is still in its cache, instead of a separate pass that reads x back from
// memory.
#include <algorithm>

#include "backend/cpu/kernels/cpu_backend.h"
#include "util/error.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

// After the target pragma, so that its loops are compiled for this level too.
#include "backend/cpu/kernels/gelu_rows.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {
namespace {

// A block's pre-activation stays in a core's L2 beside the weight until GELU has read it. 128 Ki elements (170 of
// ViT-Tiny's rows) measured best on Zen 5 (1 MiB L2) in bf16 and fp32 among 32 Ki to 1 Mi.
constexpr int64_t kBlockElements = int64_t{1} << 17;
constexpr int64_t kMinBlockRows = 32, kMaxBlockRows = 512;

struct RowBlocks {
  int64_t rows = 0;  // rows in every block but the last
  int64_t last = 0;  // rows in the last block
  int64_t count = 0;
};

// Blocks near kBlockElements, as many as a multiple of the threads where there are enough rows, so the threads finish
// together.
RowBlocks split_rows(int64_t m, int64_t row_elements, int threads) {
  const int64_t target = std::clamp(kBlockElements / std::max<int64_t>(row_elements, 1), kMinBlockRows, kMaxBlockRows);
  int64_t count = (m + target - 1) / target;
  if (count >= threads) count = (count + threads - 1) / threads * threads;
  RowBlocks b;
  b.rows = (m + count - 1) / count;
  b.count = (m + b.rows - 1) / b.rows;
  b.last = m - b.rows * (b.count - 1);
  return b;
}

template <class Pre, class Out>
void gelu_block(const void* pre, void* out, int64_t first, int64_t elements) {
  const Pre* x = static_cast<const Pre*>(pre) + first;
  gelu_run(x, static_cast<Out*>(out) + first, elements, gelu_table_for<Pre>());
}

}  // namespace

void CpuBackend::linear_gelu_forward(const Tensor& in, const Tensor& weight, const Tensor& bias,
                                     const Tensor* pre_activation, const Tensor& out) {
  VP_REQUIRE(in.rank() == 2 && weight.rank() == 2, "linear_gelu_forward: input and weight must be 2-D, got ",
             shape_string(in.shape()), " and ", shape_string(weight.shape()));
  const int64_t m = in.dim(0), k = in.dim(1), n = weight.dim(0);
  VP_REQUIRE(weight.dim(1) == k && out.numel() == m * n && in.dtype() == weight.dtype(), "linear_gelu_forward: shapes ",
             shape_string(in.shape()), " x ", shape_string(weight.shape()), "^T -> ", shape_string(out.shape()));
  VP_REQUIRE(bias.numel() == n && bias.dtype() == DType::f32, "linear_gelu_forward: bias must be [", n, "] f32");
  MatmulShape s;
  s.m = m, s.n = n, s.k = k;
  s.a_row = k, s.a_col = 1;
  s.b_row = 1, s.b_col = k;
  s.c_row = n;
  s.a_type = in.dtype(), s.b_type = weight.dtype();
  s.bias = true;
  s.pack_b = m >= kPackWeightMinRows;
  if (pre_activation == nullptr) {
    s.c_type = out.dtype();
    s.gelu = true;
    matmuls_.run(s, in.raw(), weight.raw(), out.raw(), bias.f32());
    return;
  }
  if (m == 0) return;
  const Tensor& pre = *pre_activation;
  VP_REQUIRE(pre.numel() == m * n && pre.raw() != out.raw(), "linear_gelu_forward: the pre-activation must be [", m,
             ", ", n, "] and not the output");
  const bool pre32 = pre.dtype() == DType::f32, out32 = out.dtype() == DType::f32;
  VP_REQUIRE(pre32 || !out32, "linear_gelu_forward: a bf16 pre-activation needs a bf16 output");
  void (*gelu_on)(const void*, void*, int64_t, int64_t) =
      pre32 ? (out32 ? &gelu_block<float, float> : &gelu_block<float, uint16_t>) : &gelu_block<uint16_t, uint16_t>;
  // The tables are built before the threads start (a function-local static's first use would serialise them).
  if (!pre32) gelu_table_for<uint16_t>();

  const int threads = omp_get_max_threads();
  const RowBlocks blocks = split_rows(m, n, threads);
  s.c_type = pre.dtype();
  s.m = blocks.rows;
  const MatmulCache::Prepared& body = matmuls_.prepare(s);
  s.m = blocks.last;
  const MatmulCache::Prepared& last = matmuls_.prepare(s);
  const void* body_weight = matmuls_.pack_b(body, weight.raw());
  const void* last_weight = &last == &body ? body_weight : matmuls_.pack_b(last, weight.raw());
  const char* a = static_cast<const char*>(in.raw());
  char* c = static_cast<char*>(pre.raw());
  const size_t a_es = dtype_size(in.dtype()), c_es = dtype_size(pre.dtype());
  // Inside a parallel region even for one block: a prepared primitive run outside one took 0.1-1.2 ms at 3-51 rows
  // (oneDNN 2.6), 100-400x its time inside.
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t block = 0; block < blocks.count; ++block) {
    const int64_t first = block * blocks.rows;
    const bool is_last = block == blocks.count - 1;
    const int64_t rows = is_last ? blocks.last : blocks.rows;
    matmuls_.run_prepared(is_last ? last : body, a + static_cast<size_t>(first * k) * a_es,
                          is_last ? last_weight : body_weight, c + static_cast<size_t>(first * n) * c_es, bias.f32());
    gelu_on(pre.raw(), out.raw(), first * n, rows * n);
  }
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
