// Scaled dot-product attention in FlashAttention-2's form, one (batch, head) pair per task. A task walks query tiles
// against key/value blocks with an online softmax in fp32; each tile's scores and probabilities live in a
// thread-private scratch (L1/L2-resident), so the [B, H, T, T] probabilities are never written to memory. The forward
// pass saves each row's log-sum-exp of the scaled scores (cuDNN's SDPA stats); the backward pass recomputes the
// probabilities per tile from it and takes D = rowsum(dO * O) from the forward's output. Up to kWholeHead tokens a
// head is one tile (ViT at 224 px: 197 tokens, a 155 KB score block), so the online rescaling costs nothing there;
// beyond (DINOv2 at 518 px: 1,370 tokens) tiles of kQueryTile x kKeyBlock bound the scratch (192 x 384 measured
// fastest of 64 x 256 to 256 x 512 there, 2 cores of a Zen 5). The tile products run on oneDNN primitives prepared
// once per tile shape and executed on the calling thread (at AVX-512 on dense copies of the head: kDenseHeads); at
// the amx level, bf16 heads the tile kernels take run on AMX itself (attention_tiles.h).
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/kernels/attention_dims.h"
#include "backend/cpu/kernels/attention_tiles.h"
#include "backend/cpu/kernels/cpu_backend.h"
#include "backend/cpu/kernels/vector_math.h"
#include "util/error.h"

// Last: everything below is compiled for this copy's CPU level (level_target.h).
#include "backend/cpu/kernels/level_target.h"

// After level_target.h (its own block, so include sorting keeps it there): compiled for this copy's level.
#include "backend/cpu/kernels/exp2_rows_avx2.h"
#include "backend/cpu/kernels/store_row.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {
namespace {

constexpr int64_t kWholeHead = 320;
constexpr int64_t kQueryTile = 192;
constexpr int64_t kKeyBlock = 384;

// How a head's T x T score matrix is cut: query tiles of `rows`, key blocks of `cols` (the last of each may be
// shorter).
struct TileGrid {
  int64_t tokens, rows, cols;
  int64_t query_tiles() const { return (tokens + rows - 1) / rows; }
  int64_t key_blocks() const { return (tokens + cols - 1) / cols; }
  int64_t rows_of(int64_t i) const { return std::min(rows, tokens - i * rows); }
  int64_t cols_of(int64_t j) const { return std::min(cols, tokens - j * cols); }
};

TileGrid tile_grid(int64_t tokens) {
  if (tokens <= kWholeHead) return {tokens, tokens, tokens};
  return {tokens, kQueryTile, kKeyBlock};
}

// A small per-head GEMM C[m,n] (+)= A[m,k] . B[k,n] on strided views (strides as MatmulShape's).
MatmulShape head_gemm(int64_t m, int64_t n, int64_t k, int64_t a_row, int64_t a_col, int64_t b_row, int64_t b_col,
                      int64_t c_row, DType operands, DType result, bool accumulate = false) {
  MatmulShape s;
  s.m = m, s.n = n, s.k = k;
  s.a_row = a_row, s.a_col = a_col;
  s.b_row = b_row, s.b_col = b_col;
  s.c_row = c_row;
  s.a_type = operands, s.b_type = operands, s.c_type = result;
  s.accumulate = accumulate;
  return s;
}

// One prepared primitive per tile shape: index 2 * (short rows) + (short cols).
using TileGemms = std::array<const MatmulCache::Prepared*, 4>;

template <class MakeShape>
TileGemms prepare_tiles(MatmulCache& cache, const TileGrid& g, MakeShape make) {
  TileGemms out{};
  for (int64_t i : {int64_t{0}, g.query_tiles() - 1}) {
    for (int64_t j : {int64_t{0}, g.key_blocks() - 1}) {
      const int64_t m = g.rows_of(i), n = g.cols_of(j);
      out[static_cast<size_t>(2 * (m != g.rows) + (n != g.cols))] = &cache.prepare(make(m, n));
    }
  }
  return out;
}

const MatmulCache::Prepared& gemm_for(const TileGemms& t, const TileGrid& g, int64_t m, int64_t n) {
  return *t[static_cast<size_t>(2 * (m != g.rows) + (n != g.cols))];
}

size_t element_size(DType t) { return dtype_size(t); }
int64_t padded(int64_t n) { return (n + 15) / 16 * 16; }

// Whether each task copies its head's Q, K, V (and dO) out of the [T, 3D] rows into dense [T, hd] blocks first.
// oneDNN 2.6 runs a dense 197 x 197 x 64 head GEMM on its brgemm kernels and a strided one on gemm:jit; brgemm is
// 9-15% faster at AVX-512 (bf16 and f32, Zen 5, one thread), which pays for the copy many times over. Without
// AVX-512 oneDNN has no brgemm, both are gemm:jit, and the copy would be pure cost.
constexpr bool kDenseHeads = VITPIPE_LEVEL_AVX512;

// Copies `rows` rows of `hd` elements, `row` elements apart, into a dense [rows, hd] block.
void copy_head(const char* src, int64_t rows, int64_t row, int64_t hd, size_t es, char* dst) {
  const size_t bytes = static_cast<size_t>(hd) * es;
  for (int64_t t = 0; t < rows; ++t) std::memcpy(dst + static_cast<size_t>(t) * bytes, src + t * row * es, bytes);
}

// Copies one head's Q, K and V (rows of the [T, 3D] input) into dense blocks, one after another from `copies`, and
// points q, k, v at them. Returns the bytes used.
size_t copy_qkv_heads(const AttentionDims& a, size_t es, char* copies, const char*& q, const char*& k, const char*& v) {
  const size_t head_bytes = static_cast<size_t>(a.tokens * a.head_dim) * es;
  const char* sources[3] = {q, k, v};
  const char** targets[3] = {&q, &k, &v};
  for (size_t which = 0; which < 3; ++which) {
    copy_head(sources[which], a.tokens, 3 * a.hidden, a.head_dim, es, copies + which * head_bytes);
    *targets[which] = copies + which * head_bytes;
  }
  return 3 * head_bytes;
}

// The online softmax over one key block: for each row, with s the raw scores (f32, row stride ld),
// m_new = max(m, scale * max s), p = exp(scale * s - m_new) (in the GEMM operand type), corr = exp(m - m_new),
// l = l * corr + sum p, m = m_new. P stays unnormalised: the 1 / l goes on the [rows, hd] output, not the
// [rows, cols] probabilities.
template <class P>
void online_softmax_rows(const float* s, P* p, int64_t rows, int64_t cols, int64_t ld, float scale, float* m, float* l,
                         float* corr) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = s + i * ld;
    P* out = p + i * ld;
#ifdef VITPIPE_AVX512
    using namespace simd;
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < cols; j += 16) {
      vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail_mask(cols - j), row + j));
    }
    const float m_new = std::max(m[i], reduce_max(vmax) * scale);
    // exp(scale * s - m_new) as 2^(log2(e) * (scale * s - m_new)), log2(e) folded into the multiply-add
    const __m512 shift = _mm512_set1_ps(m_new * kLog2e);
    const __m512 vscale = _mm512_set1_ps(scale * kLog2e);
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 mk = tail_mask(cols - j);
      const __m512 e = _mm512_maskz_mov_ps(mk, exp2_ps(_mm512_fmsub_ps(load(row + j, mk), vscale, shift)));
      store(out + j, e, mk);
      vsum = _mm512_add_ps(vsum, e);
    }
    const float sum = reduce_add(vsum);
#else
    float max = row[0];
#pragma omp simd reduction(max : max)
    for (int64_t j = 0; j < cols; ++j) max = row[j] > max ? row[j] : max;
    const float m_new = std::max(m[i], max * scale);
    float sum = 0.0f;
    if constexpr (std::is_same_v<P, float>) {
      sum = avx2::exp2_row(row, out, cols, scale * kLog2e, m_new * kLog2e);
    } else {
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < cols; ++j) {
        const float e = exp_approx(row[j] * scale - m_new);
        store(out + j, e);
        sum += e;
      }
    }
#endif
    corr[i] = m[i] == -INFINITY ? 0.0f : std::exp(m[i] - m_new);
    l[i] = l[i] * corr[i] + sum;
    m[i] = m_new;
  }
}

// out[i] = acc[i] / l[i] for the rows of one query tile (acc [rows, hd] f32, out rows `ld` apart).
template <class O>
void finish_rows(const float* acc, const float* l, int64_t rows, int64_t hd, O* out, int64_t ld) {
  for (int64_t i = 0; i < rows; ++i) {
    const float inv = 1.0f / l[i];
#pragma omp simd
    for (int64_t e = 0; e < hd; ++e) store(out + i * ld + e, acc[i * hd + e] * inv);
  }
}

}  // namespace

void CpuBackend::attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) {
  const AttentionDims a = attention_dims(qkv, heads, "attention_forward");
  const int64_t T = a.tokens, D = a.hidden, hd = a.head_dim;
  VP_REQUIRE(lse.numel() == a.batch * heads * T && lse.dtype() == DType::f32,
             "attention_forward: lse must be [B, H, T] f32");
  VP_REQUIRE(out.numel() == a.batch * T * D && out.dtype() == qkv.dtype(),
             "attention_forward: out must be [B, T, D] of the qkv dtype");
  const DType type = qkv.dtype();
  if (tile_unit() != TileUnit::none && tile_attention_takes(type, T, hd)) {
    return tile_attention_forward(tile_unit(), a, qkv.u16(), lse.f32(), out.u16(), attention_scratch_);
  }
  const size_t es = element_size(type);
  const TileGrid g = tile_grid(T);
  const int64_t ld = g.cols;

  // S[mi, nj] = Q_i . K_j^T;  O_i (+)= P[mi, nj] . V_j into an f32 accumulator, divided by l on the way out.
  // Q, K and V rows are `qkv_ld` elements apart: in the [T, 3D] input, or in the task's dense copies.
  const bool several_blocks = g.key_blocks() > 1;
  const int64_t qkv_ld = kDenseHeads ? hd : 3 * D;
  const TileGemms scores = prepare_tiles(matmuls_, g, [&](int64_t m, int64_t n) {
    return head_gemm(m, n, hd, qkv_ld, 1, 1, qkv_ld, ld, type, DType::f32);
  });
  const TileGemms context = prepare_tiles(matmuls_, g, [&](int64_t m, int64_t n) {
    return head_gemm(m, hd, n, ld, 1, qkv_ld, 1, hd, type, DType::f32, several_blocks);
  });

  const int threads = omp_get_max_threads();
  const int64_t tile = padded(g.rows * ld);
  const int64_t dense = kDenseHeads ? padded(3 * T * hd) : 0;  // Q, K, V copies (f32 room, whatever the type)
  // S, P, m / l / corr, O accumulator, dense Q / K / V
  const int64_t stride = 2 * tile + 3 * padded(g.rows) + padded(g.rows * hd) + dense;
  if (static_cast<int64_t>(attention_scratch_.size()) < threads * stride + 16) {
    attention_scratch_.resize(static_cast<size_t>(threads * stride + 16));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const char* qkv_bytes = static_cast<const char*>(qkv.raw());
  char* out_bytes = static_cast<char*>(out.raw());
  const size_t out_es = element_size(out.dtype());
  float* scratch_base = attention_scratch_.data();
  float* lse_base = lse.f32();

#pragma omp parallel for schedule(static) if (parallel_worth_it(a.batch * T * T * D))
  for (int64_t task = 0; task < a.batch * heads; ++task) {
    const int64_t b = task / heads, h = task % heads;
    float* s = scratch_base + omp_get_thread_num() * stride;
    float* p = s + tile;
    float* m = p + tile;
    float* l = m + padded(g.rows);
    float* corr = l + padded(g.rows);
    float* acc = corr + padded(g.rows);
    const char* q = qkv_bytes + static_cast<size_t>(b * T * 3 * D + h * hd) * es;
    const char* k = q + static_cast<size_t>(D) * es;
    const char* v = q + static_cast<size_t>(2 * D) * es;
    if (kDenseHeads) copy_qkv_heads(a, es, reinterpret_cast<char*>(acc + padded(g.rows * hd)), q, k, v);
    char* o = out_bytes + static_cast<size_t>(b * T * D + h * hd) * out_es;
    float* lse_row = lse_base + task * T;
    for (int64_t i = 0; i < g.query_tiles(); ++i) {
      const int64_t i0 = i * g.rows, mi = g.rows_of(i);
      const char* qi = q + static_cast<size_t>(i0 * qkv_ld) * es;
      std::fill(m, m + mi, -INFINITY);
      std::fill(l, l + mi, 0.0f);
      if (several_blocks) std::fill(acc, acc + mi * hd, 0.0f);
      for (int64_t j = 0; j < g.key_blocks(); ++j) {
        const int64_t j0 = j * g.cols, nj = g.cols_of(j);
        matmuls_.run_prepared(gemm_for(scores, g, mi, nj), qi, k + static_cast<size_t>(j0 * qkv_ld) * es, s);
        if (type == DType::f32) {
          online_softmax_rows(s, p, mi, nj, ld, scale, m, l, corr);
        } else {
          online_softmax_rows(s, reinterpret_cast<uint16_t*>(p), mi, nj, ld, scale, m, l, corr);
        }
        if (several_blocks && j > 0) {
          for (int64_t r = 0; r < mi; ++r) {
            float* ar = acc + r * hd;
            const float c = corr[r];
#pragma omp simd
            for (int64_t e = 0; e < hd; ++e) ar[e] *= c;
          }
        }
        matmuls_.run_prepared(gemm_for(context, g, mi, nj), p, v + static_cast<size_t>(j0 * qkv_ld) * es, acc);
      }
      if (out.dtype() == DType::f32) {
        finish_rows(acc, l, mi, hd, reinterpret_cast<float*>(o) + i0 * D, D);
      } else {
        finish_rows(acc, l, mi, hd, reinterpret_cast<uint16_t*>(o) + i0 * D, D);
      }
      for (int64_t r = 0; r < mi; ++r) lse_row[i0 + r] = m[r] + std::log(l[r]);
    }
  }
}

namespace {

// P = exp(scale * s - lse) per row (s f32 raw scores, P the GEMM operand type, both rows `ld` apart).
template <class P>
void probabilities_rows(const float* s, const float* lse, P* p, int64_t rows, int64_t cols, int64_t ld, float scale) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = s + i * ld;
    P* out = p + i * ld;
#ifdef VITPIPE_AVX512
    using namespace simd;
    const __m512 shift = _mm512_set1_ps(lse[i] * kLog2e);  // as in online_softmax_rows
    const __m512 vscale = _mm512_set1_ps(scale * kLog2e);
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 mk = tail_mask(cols - j);
      store(out + j, exp2_ps(_mm512_fmsub_ps(load(row + j, mk), vscale, shift)), mk);
    }
#else
    if constexpr (std::is_same_v<P, float>) {
      avx2::exp2_row(row, out, cols, scale * kLog2e, lse[i] * kLog2e);
    } else {
      const float shift = lse[i];
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) store(out + j, exp_approx(row[j] * scale - shift));
    }
#endif
  }
}

// dS = P * (dP - D) * scale per row (P as stored, dP f32, D = rowsum(dO * O)), written in the GEMM operand type.
template <class P>
void softmax_backward_rows(const P* p, const float* dp, const float* dsum, P* ds, int64_t rows, int64_t cols,
                           int64_t ld, float scale) {
  for (int64_t i = 0; i < rows; ++i) {
    const P* pr = p + i * ld;
    const float* dpr = dp + i * ld;
    P* out = ds + i * ld;
#ifdef VITPIPE_AVX512
    using namespace simd;
    const __m512 dot = _mm512_set1_ps(dsum[i]);
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 mk = tail_mask(cols - j);
      store(out + j, _mm512_mul_ps(_mm512_mul_ps(load(pr + j, mk), _mm512_sub_ps(load(dpr + j, mk), dot)), vscale), mk);
    }
#else
    const float dot = dsum[i];
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) store(out + j, load(pr + j) * (dpr[j] - dot) * scale);
#endif
  }
}

// D[t] = dO[t] . O[t] over one head's columns (rows `ld` apart).
template <class T>
void output_dot_rows(const T* dout, const T* o, int64_t rows, int64_t hd, int64_t ld, float* d) {
  for (int64_t t = 0; t < rows; ++t) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t e = 0; e < hd; ++e) sum += load(dout + t * ld + e) * load(o + t * ld + e);
    d[t] = sum;
  }
}

#if VITPIPE_LEVEL_AVX512_BF16
// The same for bf16 heads of a multiple of 32 dimensions, on vdpbf16ps: 32 products per instruction, summed in fp32.
void output_dot_rows(const uint16_t* dout, const uint16_t* o, int64_t rows, int64_t hd, int64_t ld, float* d) {
  if (hd % 32 != 0) return output_dot_rows<uint16_t>(dout, o, rows, hd, ld, d);
  for (int64_t t = 0; t < rows; ++t) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t e = 0; e < hd; e += 32) {
      acc = _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(_mm512_loadu_si512(dout + t * ld + e)),
                             reinterpret_cast<__m512bh>(_mm512_loadu_si512(o + t * ld + e)));
    }
    d[t] = simd::reduce_add(acc);
  }
}
#endif

// colsum[j] += sum over T rows of src[t, j] (f32 rows `row` elements apart). Four registers of sums per block of
// columns, so the adds down a column do not wait on each other (summing into colsum in memory chained every row on
// the last row's store: a fifth of the backward pass's own time, perf on Zen 5).
void add_head_column_sums(const float* src, int64_t T, int64_t hd, int64_t row, float* colsum) {
#ifdef VITPIPE_AVX512
  for (int64_t j = 0; j < hd; j += 64) {
    __m512 sum[4];
    __mmask16 mask[4];
    for (int c = 0; c < 4; ++c) {
      const int64_t left = hd - j - 16 * c;
      mask[c] = left > 0 ? simd::tail_mask(left) : __mmask16{0};
      sum[c] = _mm512_setzero_ps();
    }
    for (int64_t t = 0; t < T; ++t) {
      for (int c = 0; c < 4; ++c) sum[c] = _mm512_add_ps(sum[c], simd::load(src + t * row + j + 16 * c, mask[c]));
    }
    for (int c = 0; c < 4; ++c) {
      float* out = colsum + j + 16 * c;
      _mm512_mask_storeu_ps(out, mask[c], _mm512_add_ps(simd::load(out, mask[c]), sum[c]));
    }
  }
#else
  auto add_block = [&]<int64_t kWidth>(int64_t j) {
    float sum[kWidth] = {};
    for (int64_t t = 0; t < T; ++t) {
#pragma omp simd
      for (int64_t e = 0; e < kWidth; ++e) sum[e] += src[t * row + j + e];
    }
    for (int64_t e = 0; e < kWidth; ++e) colsum[j + e] += sum[e];
  };
  int64_t j = 0;
  for (; j + 32 <= hd; j += 32) add_block.template operator()<32>(j);  // four AVX2 registers
  for (; j + 8 <= hd; j += 8) add_block.template operator()<8>(j);
  for (; j < hd; ++j) add_block.template operator()<1>(j);
#endif
}

// Copies a head's dense f32 [T, hd] gradient into its columns of grad_qkv (rows dst_row apart, f32 or bf16) and adds
// its column sums into colsum where that is given.
template <class G>
void write_head_gradient(const float* src, int64_t T, int64_t hd, G* dst, int64_t dst_row, float* colsum) {
  for (int64_t t = 0; t < T; ++t) store_row(src + t * hd, dst + t * dst_row, hd);
  if (colsum) add_head_column_sums(src, T, hd, hd, colsum);
}

}  // namespace

void CpuBackend::attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                    int64_t heads, const Tensor& grad_qkv, const Tensor* grad_qkv_bias) {
  const AttentionDims a = attention_dims(qkv, heads, "attention_backward");
  const int64_t T = a.tokens, D = a.hidden, hd = a.head_dim;
  const DType type = qkv.dtype();
  VP_REQUIRE(grad_out.numel() == a.batch * T * D && grad_out.dtype() == type && out.numel() == a.batch * T * D &&
                 out.dtype() == type,
             "attention_backward: grad_out and out must be [B, T, D] of the qkv dtype");
  VP_REQUIRE(lse.numel() == a.batch * heads * T && lse.dtype() == DType::f32,
             "attention_backward: lse must be [B, H, T] f32");
  VP_REQUIRE(grad_qkv.numel() == qkv.numel(), "attention_backward: grad_qkv must be [B, T, 3D]");
  if (tile_unit() != TileUnit::none && tile_attention_takes(type, T, hd)) {
    if (grad_qkv_bias) partials_.reset(omp_get_max_threads(), 3 * D);
    tile_attention_backward(tile_unit(), a, grad_out.u16(), qkv.u16(), out.u16(), lse.f32(), grad_qkv.raw(),
                            grad_qkv.dtype(), grad_qkv_bias ? &partials_ : nullptr, attention_scratch_);
    if (grad_qkv_bias) partials_.add_into(grad_qkv_bias->f32(), 3 * D);
    return;
  }
  const size_t es = element_size(type);
  const TileGrid g = tile_grid(T);
  const int64_t ld = g.cols;
  // dV_j and dK_j sum over query tiles, dQ_i over key blocks: accumulating GEMMs only where there is more than one.
  const bool sum_over_queries = g.query_tiles() > 1, sum_over_keys = g.key_blocks() > 1;
  // A head of one tile with f32 gradients writes dQ, dK, dV from its GEMMs straight into grad_qkv's rows: the copy
  // out of the scratch was 8% of the backward pass (AVX2, Zen 5), most of it waiting on the stores into grad_qkv.
  // bf16 gradients keep the copy: oneDNN's GEMMs writing bf16 were slower than the copy's conversion (Zen 5).
  const DType grad_type = grad_qkv.dtype();
  const bool direct = !sum_over_queries && !sum_over_keys && grad_type == DType::f32;
  const int64_t grad_ld = direct ? 3 * D : hd;  // dQ / dK / dV rows (f32): in grad_qkv, or in the scratch

  // S = Q_i K_j^T;  dV_j (+)= P^T dO_i;  dP = dO_i V_j^T;  dQ_i (+)= dS K_j;  dK_j (+)= dS^T Q_i  (f32 results).
  // Q, K, V rows are `qkv_ld` elements apart and dO's `dout_ld`: in the inputs, or in the task's dense copies.
  const int64_t qkv_ld = kDenseHeads ? hd : 3 * D, dout_ld = kDenseHeads ? hd : D;
  const TileGemms scores_mm = prepare_tiles(matmuls_, g, [&](int64_t m, int64_t n) {
    return head_gemm(m, n, hd, qkv_ld, 1, 1, qkv_ld, ld, type, DType::f32);
  });
  const TileGemms dv_mm = prepare_tiles(matmuls_, g, [&](int64_t m, int64_t n) {
    return head_gemm(n, hd, m, 1, ld, dout_ld, 1, grad_ld, type, DType::f32, sum_over_queries);
  });
  const TileGemms dp_mm = prepare_tiles(matmuls_, g, [&](int64_t m, int64_t n) {
    return head_gemm(m, n, hd, dout_ld, 1, 1, qkv_ld, ld, type, DType::f32);
  });
  const TileGemms dq_mm = prepare_tiles(matmuls_, g, [&](int64_t m, int64_t n) {
    return head_gemm(m, hd, n, ld, 1, qkv_ld, 1, grad_ld, type, DType::f32, sum_over_keys);
  });
  const TileGemms dk_mm = prepare_tiles(matmuls_, g, [&](int64_t m, int64_t n) {
    return head_gemm(n, hd, m, 1, ld, qkv_ld, 1, grad_ld, type, DType::f32, sum_over_queries);
  });

  const int threads = omp_get_max_threads();
  const int64_t tile = padded(g.rows * ld);
  const int64_t th = padded(T * hd);
  const int64_t dense = kDenseHeads ? 4 * th : 0;  // Q, K, V, dO copies (f32 room, whatever the type)
  // S / dP (f32), P, dS (<= f32), dQ, dK, dV (f32), D, dense copies
  const int64_t stride = 3 * tile + 3 * th + padded(T) + dense;
  if (static_cast<int64_t>(attention_scratch_.size()) < threads * stride + 16) {
    attention_scratch_.resize(static_cast<size_t>(threads * stride + 16));
  }
  float* scratch_base = attention_scratch_.data();
  const bool colsum = grad_qkv_bias != nullptr;
  if (colsum) partials_.reset(threads, 3 * D);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const char* qkv_bytes = static_cast<const char*>(qkv.raw());
  const char* out_bytes = static_cast<const char*>(out.raw());
  const char* dout_bytes = static_cast<const char*>(grad_out.raw());
  const float* lse_base = lse.f32();
  void* grad_base = grad_qkv.raw();

#pragma omp parallel for schedule(static) if (parallel_worth_it(a.batch * T * T * D))
  for (int64_t task = 0; task < a.batch * heads; ++task) {
    const int64_t b = task / heads, h = task % heads;
    const int thread = omp_get_thread_num();
    float* s = scratch_base + thread * stride;
    float* p = s + tile;
    float* ds = p + tile;
    float* dsum = ds + tile + 3 * th;
    const int64_t offset = b * T * 3 * D + h * hd;
    // dQ, dK, dV: the head's columns of grad_qkv, or the scratch; rows grad_ld apart
    float* dq = direct ? static_cast<float*>(grad_base) + offset : ds + tile;
    float* dk = direct ? dq + D : ds + tile + th;
    float* dv = direct ? dq + 2 * D : ds + tile + 2 * th;
    const char* q = qkv_bytes + static_cast<size_t>(b * T * 3 * D + h * hd) * es;
    const char* k = q + static_cast<size_t>(D) * es;
    const char* v = q + static_cast<size_t>(2 * D) * es;
    const size_t head_offset = static_cast<size_t>(b * T * D + h * hd) * es;
    const char* o = out_bytes + head_offset;
    const char* dout = dout_bytes + head_offset;
    const float* lse_row = lse_base + task * T;
    if (type == DType::f32) {
      output_dot_rows(reinterpret_cast<const float*>(dout), reinterpret_cast<const float*>(o), T, hd, D, dsum);
    } else {
      output_dot_rows(reinterpret_cast<const uint16_t*>(dout), reinterpret_cast<const uint16_t*>(o), T, hd, D, dsum);
    }
    if (kDenseHeads) {
      char* copies = reinterpret_cast<char*>(dsum + padded(T));
      char* dout_copy = copies + copy_qkv_heads(a, es, copies, q, k, v);
      copy_head(dout, T, D, hd, es, dout_copy);
      dout = dout_copy;
    }
    if (sum_over_keys) std::fill(dq, dq + T * hd, 0.0f);
    if (sum_over_queries) {
      std::fill(dk, dk + T * hd, 0.0f);
      std::fill(dv, dv + T * hd, 0.0f);
    }
    for (int64_t i = 0; i < g.query_tiles(); ++i) {
      const int64_t i0 = i * g.rows, mi = g.rows_of(i);
      const char* qi = q + static_cast<size_t>(i0 * qkv_ld) * es;
      const char* doi = dout + static_cast<size_t>(i0 * dout_ld) * es;
      for (int64_t j = 0; j < g.key_blocks(); ++j) {
        const int64_t j0 = j * g.cols, nj = g.cols_of(j);
        const char* kj = k + static_cast<size_t>(j0 * qkv_ld) * es;
        const char* vj = v + static_cast<size_t>(j0 * qkv_ld) * es;
        matmuls_.run_prepared(gemm_for(scores_mm, g, mi, nj), qi, kj, s);
        if (type == DType::f32) {
          probabilities_rows(s, lse_row + i0, p, mi, nj, ld, scale);
        } else {
          probabilities_rows(s, lse_row + i0, reinterpret_cast<uint16_t*>(p), mi, nj, ld, scale);
        }
        matmuls_.run_prepared(gemm_for(dv_mm, g, mi, nj), p, doi, dv + j0 * grad_ld);
        matmuls_.run_prepared(gemm_for(dp_mm, g, mi, nj), doi, vj, s);
        if (type == DType::f32) {
          softmax_backward_rows(p, s, dsum + i0, ds, mi, nj, ld, scale);
        } else {
          softmax_backward_rows(reinterpret_cast<const uint16_t*>(p), s, dsum + i0, reinterpret_cast<uint16_t*>(ds), mi,
                                nj, ld, scale);
        }
        matmuls_.run_prepared(gemm_for(dq_mm, g, mi, nj), ds, kj, dq + i0 * grad_ld);
        matmuls_.run_prepared(gemm_for(dk_mm, g, mi, nj), ds, qi, dk + j0 * grad_ld);
      }
    }
    float* cs = colsum ? partials_.row(thread) : nullptr;
    const float* parts[3] = {dq, dk, dv};
    for (int which = 0; which < 3; ++which) {
      // The key bias gradient is exactly zero (softmax ignores the per-row constant q.b_k): summing dK would only
      // add rounding noise, which Adam's normalisation turns into full-size random updates of the key bias.
      float* part_colsum = cs && which != 1 ? cs + which * D + h * hd : nullptr;
      if (direct) {
        if (part_colsum) add_head_column_sums(parts[which], T, hd, 3 * D, part_colsum);
      } else if (grad_type == DType::f32) {
        write_head_gradient(parts[which], T, hd, static_cast<float*>(grad_base) + offset + which * D, 3 * D,
                            part_colsum);
      } else {
        write_head_gradient(parts[which], T, hd, static_cast<uint16_t*>(grad_base) + offset + which * D, 3 * D,
                            part_colsum);
      }
    }
  }
  if (colsum) partials_.add_into(grad_qkv_bias->f32(), 3 * D);
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
