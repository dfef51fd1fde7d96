// oneDNN matmul primitives, created once per (shape, strides, dtypes, epilogue) and reused: creating a primitive
// JIT-compiles a kernel, which costs far more than running it on a ViT-sized problem.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/cpu/cpu_level.h"
#include "tensor/tensor.h"

namespace vitpipe::cpu {

// Rows of A from which a weight B is worth packing (MatmulShape::pack_b): the copy costs K*N, the product M*K*N.
// Packed, ViT-Tiny's linear GEMMs ran 4-9% faster at 6,304 rows (bf16, 2 Zen 5 cores).
constexpr int64_t kPackWeightMinRows = 256;

// C[M,N] (+)= A[M,K] . B[K,N], each operand a strided 2-D view: element (i, j) of A is at a[i * a_row + j * a_col].
struct MatmulShape {
  int64_t m = 0, n = 0, k = 0;
  int64_t a_row = 0, a_col = 1;  // A strides
  int64_t b_row = 0, b_col = 1;  // B strides
  int64_t c_row = 0;             // C row stride (columns contiguous)
  DType a_type = DType::f32, b_type = DType::f32, c_type = DType::f32;
  bool bias = false;        // + bias[N] (f32)
  bool residual = false;    // + R[M,N] (f32, contiguous rows of stride c_row)
  bool accumulate = false;  // C += instead of C =
  bool gelu = false;        // C = GELU(...) (exact erf), after bias and residual
  // B is a weight, small beside the rows of A: it is copied into oneDNN's blocked layout before the product
  // (weights change every step, so per call): run() does it, prepared matmuls take pack_b()'s copy. Not when widened.
  bool pack_b = false;

  auto key() const {
    return std::make_tuple(m, n, k, a_row, a_col, b_row, b_col, c_row, static_cast<int>(a_type),
                           static_cast<int>(b_type), static_cast<int>(c_type), bias, residual, accumulate, gelu,
                           pack_b);
  }
};

struct Bf16Widening;

class MatmulCache {
 public:
  MatmulCache();
  ~MatmulCache();
  // Runs on the calling thread's OpenMP team (the whole team when called outside a parallel region).
  void run(const MatmulShape& shape, const void* a, const void* b, void* c, const float* bias = nullptr,
           const float* residual = nullptr);
  // For small GEMMs issued from inside an OpenMP parallel region (attention): one stream per thread, user
  // scratchpads, so threads never share mutable state. Call prepare() outside the region first. A bias (f32 [N])
  // is taken when the shape has one; a residual is not. run_prepared belongs inside a parallel region: outside one,
  // oneDNN 2.6 ran small prepared GEMMs 100-400x slower (fc1 at 3-51 rows, linear_gelu.cpp).
  struct Prepared;
  const Prepared& prepare(const MatmulShape& shape);
  void run_prepared(const Prepared& prepared, const void* a, const void* b, void* c, const float* bias = nullptr);
  // The B that run_prepared takes: `b` itself, or, for a shape with pack_b, its copy in the primitive's layout (held
  // by `prepared` until the next pack_b). Call outside the parallel region, once per B.
  const void* pack_b(const Prepared& prepared, const void* b);
  dnnl::engine& engine() { return engine_; }
  // Whether bf16 shapes run on oneDNN's bf16 kernels (false: widened to fp32, see bf16_widening.h).
  bool bf16_in_hardware() const { return bf16_kernels_; }

 private:
  using Key = decltype(MatmulShape{}.key());
  std::shared_ptr<Prepared> create(const MatmulShape& shape, bool user_scratchpad);
  // One attempt: `widen` runs the bf16 operands on an fp32 primitive. Throws dnnl::error when oneDNN has no kernel.
  std::shared_ptr<Prepared> create_as(const MatmulShape& shape, bool user_scratchpad, bool widen);
  CpuLevel level_;  // first: choosing it may cap oneDNN's ISA, which must precede the engine
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<Key, std::shared_ptr<Prepared>> cache_;
  std::map<Key, std::shared_ptr<Prepared>> thread_cache_;
  std::vector<std::unique_ptr<dnnl::stream>> thread_streams_;
  bool bf16_kernels_;
  Tensor wide_a_, wide_b_, wide_c_;  // run()'s fp32 copies of bf16 operands, kept for reuse
};

struct MatmulCache::Prepared {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
  dnnl::memory::desc a_desc, b_desc, c_desc, bias_desc, residual_desc;
  // pack_b: the primitive reads B in packed_b_desc (oneDNN's choice), filled from b_desc by pack_b_reorder.
  dnnl::memory::desc packed_b_desc;
  dnnl::reorder pack_b_reorder;
  bool packs_b = false;
  Tensor packed_b;  // the last B packed for this primitive
  const dnnl::memory::desc& b_read_desc() const { return packs_b ? packed_b_desc : b_desc; }
  size_t scratchpad_bytes = 0;
  bool has_bias = false;
  std::unique_ptr<Bf16Widening> widening;  // set when bf16 operands run on an fp32 primitive
  // Per OpenMP thread: memory objects and the argument map, made once; each run only swaps data pointers.
  struct ThreadArgs {
    dnnl::memory a, b, c, bias;
    std::vector<char> scratchpad;
    std::vector<float> wide_a, wide_b, wide_c;  // fp32 copies when widening
    std::unordered_map<int, dnnl::memory> args;
  };
  std::vector<ThreadArgs> thread_args;
};

}  // namespace vitpipe::cpu
