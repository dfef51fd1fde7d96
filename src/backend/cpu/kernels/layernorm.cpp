// LayerNorm over the last dimension, statistics in fp32 (biased variance, as torch). Forward reads the input once
// and writes the output once; the backward fuses the residual-gradient add, an optional bf16 copy of the result and
// the column sums the upstream linear layer's bias needs, so the residual gradient is touched in one pass.
#include <cmath>

#include "backend/cpu/kernels/cpu_backend.h"
#include "backend/cpu/kernels/vector_math.h"
#include "util/error.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

// After level_target.h (its own block, so include sorting keeps it there): compiled for this copy's level.
#include "backend/cpu/kernels/store_row.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {
namespace {

template <class Out>
void layernorm_rows(const float* in, const float* weight, const float* bias, float eps, Out* out, float* mean_out,
                    float* rstd_out, int64_t rows, int64_t d) {
#pragma omp parallel for schedule(static) if (parallel_worth_it(rows * d))
  for (int64_t i = 0; i < rows; ++i) {
    const float* x = in + i * d;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < d; ++j) sum += x[j];
    const float mean = sum / static_cast<float>(d);
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t j = 0; j < d; ++j) {
      const float c = x[j] - mean;
      sq += c * c;
    }
    const float rstd = 1.0f / std::sqrt(sq / static_cast<float>(d) + eps);
    Out* y = out + i * d;
#ifdef VITPIPE_AVX512
    for (int64_t j = 0; j < d; j += 16) {
      const __mmask16 m = simd::tail_mask(d - j);
      const __m512 xhat =
          _mm512_mul_ps(_mm512_sub_ps(simd::load(x + j, m), _mm512_set1_ps(mean)), _mm512_set1_ps(rstd));
      simd::store(y + j, _mm512_fmadd_ps(xhat, simd::load(weight + j, m), simd::load(bias + j, m)), m);
    }
#else
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) store(y + j, (x[j] - mean) * rstd * weight[j] + bias[j]);
#endif
    mean_out[i] = mean;
    rstd_out[i] = rstd;
  }
}

template <class GradOut, class Copy>
void layernorm_backward_rows(const LayerNormBackwardArgs& a, const GradOut* grad_out, Copy* copy,
                             ThreadPartials& dweight_partials, ThreadPartials& dbias_partials,
                             ThreadPartials& colsum_partials) {
  const int64_t d = a.in.dim(-1);
  const int64_t rows = a.in.numel() / d;
  const float* in = a.in.f32();
  const float* weight = a.weight.f32();
  const float* mean = a.mean.f32();
  const float* rstd = a.rstd.f32();
  float* grad_in = a.grad_in.f32();
  const float* residual = a.grad_residual.defined() && a.grad_residual.numel() ? a.grad_residual.f32() : nullptr;
  const bool colsum = a.grad_in_colsum.numel() > 0;
  const int threads = omp_get_max_threads();
  dweight_partials.reset(threads, d);
  dbias_partials.reset(threads, d);
  if (colsum) colsum_partials.reset(threads, d);
  const float inv_d = 1.0f / static_cast<float>(d);
#pragma omp parallel if (parallel_worth_it(rows * d))
  {
    const int t = omp_get_thread_num();
    float* dw = dweight_partials.row(t);
    float* db = dbias_partials.row(t);
    float* cs = colsum ? colsum_partials.row(t) : nullptr;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < rows; ++i) {
      const float* x = in + i * d;
      const GradOut* dy = grad_out + i * d;
      const float mu = mean[i], rs = rstd[i];
      float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
      for (int64_t j = 0; j < d; ++j) {
        const float dyj = load(dy + j);
        const float xhat = (x[j] - mu) * rs;
        const float g = dyj * weight[j];
        sum_g += g;
        sum_gx += g * xhat;
        dw[j] += dyj * xhat;
        db[j] += dyj;
      }
      const float mean_g = sum_g * inv_d, mean_gx = sum_gx * inv_d;
      float* dx = grad_in + i * d;
      const float* r = residual ? residual + i * d : nullptr;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) {
        const float xhat = (x[j] - mu) * rs;
        float v = rs * (load(dy + j) * weight[j] - mean_g - xhat * mean_gx);
        if (r) v += r[j];
        dx[j] = v;
      }
      if (copy) store_row(dx, copy + i * d, d);
      if (cs) {
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) cs[j] += dx[j];
      }
    }
  }
  dweight_partials.add_into(a.grad_weight.f32(), d);
  dbias_partials.add_into(a.grad_bias.f32(), d);
  if (colsum) colsum_partials.add_into(a.grad_in_colsum.f32(), d);
}

}  // namespace

void CpuBackend::layernorm_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps,
                                   const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  const int64_t d = in.dim(-1);
  const int64_t rows = in.numel() / d;
  VP_REQUIRE(weight.numel() == d && bias.numel() == d && out.numel() == in.numel() && mean.numel() == rows &&
                 rstd.numel() == rows,
             "layernorm_forward: inconsistent shapes for input ", shape_string(in.shape()));
  const float e = static_cast<float>(eps);
  if (out.dtype() == DType::f32) {
    layernorm_rows(in.f32(), weight.f32(), bias.f32(), e, out.f32(), mean.f32(), rstd.f32(), rows, d);
  } else {
    layernorm_rows(in.f32(), weight.f32(), bias.f32(), e, out.u16(), mean.f32(), rstd.f32(), rows, d);
  }
}

void CpuBackend::layernorm_backward(const LayerNormBackwardArgs& a) {
  const int64_t n = a.in.numel();
  VP_REQUIRE(a.grad_out.numel() == n && a.grad_in.numel() == n, "layernorm_backward: inconsistent shapes");
  VP_REQUIRE(a.grad_residual.numel() == 0 || a.grad_residual.numel() == n, "layernorm_backward: residual shape");
  const bool f32_grad = a.grad_out.dtype() == DType::f32;
  const bool has_copy = a.grad_in_copy.numel() > 0;
  const bool f32_copy = has_copy && a.grad_in_copy.dtype() == DType::f32;
  if (f32_grad) {
    if (!has_copy) {
      layernorm_backward_rows<float, float>(a, a.grad_out.f32(), nullptr, partials_, partials2_, partials3_);
    } else if (f32_copy) {
      layernorm_backward_rows(a, a.grad_out.f32(), a.grad_in_copy.f32(), partials_, partials2_, partials3_);
    } else {
      layernorm_backward_rows(a, a.grad_out.f32(), a.grad_in_copy.u16(), partials_, partials2_, partials3_);
    }
  } else {
    if (!has_copy) {
      layernorm_backward_rows<uint16_t, float>(a, a.grad_out.u16(), nullptr, partials_, partials2_, partials3_);
    } else if (f32_copy) {
      layernorm_backward_rows(a, a.grad_out.u16(), a.grad_in_copy.f32(), partials_, partials2_, partials3_);
    } else {
      layernorm_backward_rows(a, a.grad_out.u16(), a.grad_in_copy.u16(), partials_, partials2_, partials3_);
    }
  }
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
