// bf16 flash-attention backward on tensor cores (mma.sync m16n8k16, bf16 operands, fp32 accumulators), from the
// forward's lse, without atomics. Two kernels, each block of 4 warps owning 64 rows (16 per warp, the mma's M):
//   dQ kernel: a block's 64 query rows keep Q and dO as A fragments in registers and walk the keys in tiles of 64
//     staged in shared memory (K and V read once per block, reused by all its query rows): S = Q K^T, P, dP = dO V^T,
//     dS in registers, then dQ += dS K with dS re-packed from accumulator to A fragments. It also writes D = rowsum(dO
//     * O) per query row for the other kernel (stream order).
//   dK/dV kernel: a block's 64 key rows keep K and V as A fragments and walk the queries in tiles of 64 (Q, dO, lse,
//     D in shared memory): S^T = K Q^T, P^T, dP^T = V dO^T, dS^T, then dV += P^T dO and dK += dS^T Q.
// The arithmetic and the order of k-steps and tiles are flash_attention_bf16_math.h's, whose host model the CPU suite
// holds to float64 and to PyTorch. The fragment loads and the tile staging are that header's too (load_a_fragment,
// load_b_fragment[_transposed], accumulator_pair_as_a, stage_tile_rows), which the CPU suite runs over the packed
// layout with an emulated mma.sync. NOT YET RUN ON A GPU.
#include <cuda_bf16.h>
#include <math.h>

#include <cstdint>

#include "backend/cuda/kernels/flash_attention_bf16.h"
#include "backend/cuda/kernels/flash_attention_bf16_math.h"
#include "backend/cuda/kernels/warp_sum.h"

namespace vitpipe::cuda {
namespace {

using bf16 = __nv_bfloat16;

// Two floats as one register of two bf16 (low half first), rounded to nearest even.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// c += a b for a 16x16 bf16 A fragment and a 16x8 bf16 B fragment (PTX ISA's m16n8k16 layouts), fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Accumulators of a 16 x 8n tile (n-tiles of 8 columns) as the A fragment of k-step `ks` (columns 16 ks .. 16 ks + 15:
// n-tiles 2 ks and 2 ks + 1), rounded to bf16 (the values given are P or dS).
__device__ __forceinline__ void accumulators_as_a(uint32_t (&a)[4], const float (*acc)[4], int ks) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    float lo, hi;
    accumulator_pair_as_a(acc, ks, r, &lo, &hi);
    a[r] = pack_bf16(lo, hi);
  }
}

// A tile of one head's rows into shared memory by the block's threads (flash_attention_bf16_math.h).
template <int D>
__device__ __forceinline__ void stage_tile(bf16 (*shared)[D + kFlashBf16SharedPad], const bf16* m, int64_t ld,
                                           int64_t row0, int64_t rows) {
  stage_tile_rows<D>(shared, m, ld, row0, rows, threadIdx.x, blockDim.x);
}

struct HeadPointers {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  const bf16* o;
  const bf16* d_o;
  bf16* dq;
  bf16* dk;
  bf16* dv;
  const float* lse;
  float* row_dot;
};

__device__ __forceinline__ HeadPointers head_pointers(const bf16* qkv, const bf16* out, const bf16* grad_out,
                                                      const float* lse, float* row_dot, bf16* grad_qkv, int64_t tokens,
                                                      int64_t heads, int64_t head_dim) {
  const int64_t b = blockIdx.z, h = blockIdx.y, hidden = heads * head_dim;
  const int64_t qkv_offset = b * tokens * 3 * hidden + h * head_dim, o_offset = b * tokens * hidden + h * head_dim;
  const int64_t stats = (b * heads + h) * tokens;
  return {qkv + qkv_offset,
          qkv + qkv_offset + hidden,
          qkv + qkv_offset + 2 * hidden,
          out + o_offset,
          grad_out + o_offset,
          grad_qkv + qkv_offset,
          grad_qkv + qkv_offset + hidden,
          grad_qkv + qkv_offset + 2 * hidden,
          lse + stats,
          row_dot + stats};
}

// dQ and D for a block's 64 query rows.
template <int D>
__global__ void __launch_bounds__(kFlashBf16Warps * 32, 1)
    flash_attention_backward_query_bf16(const bf16* __restrict__ qkv, const bf16* __restrict__ out,
                                        const bf16* __restrict__ grad_out, const float* __restrict__ lse,
                                        float* __restrict__ row_dot, bf16* __restrict__ grad_qkv, int64_t tokens,
                                        int64_t heads, float scale) {
  constexpr int kSteps = D / kMmaK, kTilesN = kFlashBf16Tile / kMmaN, kOutN = D / kMmaN;
  __shared__ __align__(16) bf16 keys[kFlashBf16Tile][D + kFlashBf16SharedPad];
  __shared__ __align__(16) bf16 values[kFlashBf16Tile][D + kFlashBf16SharedPad];

  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int g = lane / 4;  // the lane's accumulator rows are g and g + 8 (mma_c_element)
  const HeadPointers p = head_pointers(qkv, out, grad_out, lse, row_dot, grad_qkv, tokens, heads, D);
  const int64_t ld = 3 * heads * D, ld_o = heads * D;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kFlashBf16Rows + warp * kMmaM;

  // D_i of the warp's 16 rows, each summed in the butterfly; lane keeps its rows g and g + 8.
  float row_dot_lo = 0.0f, row_dot_hi = 0.0f;
  for (int r = 0; r < kMmaM; ++r) {
    const int64_t i = r0 + r;
    float partial = 0.0f;
    if (i < tokens) {
      for (int e = lane; e < D; e += 32) {
        partial += __bfloat162float(p.d_o[i * ld_o + e]) * __bfloat162float(p.o[i * ld_o + e]);
      }
    }
    const float dot = warp_sum(partial);
    if (lane == 0 && i < tokens) p.row_dot[i] = dot;
    if (r == g) row_dot_lo = dot;
    if (r == g + 8) row_dot_hi = dot;
  }
  const float lse_lo = r0 + g < tokens ? p.lse[r0 + g] : 0.0f;
  const float lse_hi = r0 + g + 8 < tokens ? p.lse[r0 + g + 8] : 0.0f;

  uint32_t q_frag[kSteps][4], do_frag[kSteps][4];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    load_a_fragment(q_frag[s], p.q, ld, r0, tokens, s * kMmaK, lane);
    load_a_fragment(do_frag[s], p.d_o, ld_o, r0, tokens, s * kMmaK, lane);
  }
  float dq[kOutN][4] = {};

  for (int64_t j0 = 0; j0 < tokens; j0 += kFlashBf16Tile) {
    __syncthreads();  // the previous tile's readers are done
    stage_tile<D>(keys, p.k, ld, j0, tokens);
    stage_tile<D>(values, p.v, ld, j0, tokens);
    __syncthreads();

    float s_acc[kTilesN][4] = {}, dp_acc[kTilesN][4] = {};
#pragma unroll
    for (int n = 0; n < kTilesN; ++n) {
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        uint32_t b0, b1;
        load_b_fragment_transposed(b0, b1, keys, n * kMmaN, s * kMmaK, lane);
        mma_bf16(s_acc[n], q_frag[s], b0, b1);
        load_b_fragment_transposed(b0, b1, values, n * kMmaN, s * kMmaK, lane);
        mma_bf16(dp_acc[n], do_frag[s], b0, b1);
      }
    }
    // P and dS in place of the accumulators (dS kept; P is only needed for dS here).
#pragma unroll
    for (int n = 0; n < kTilesN; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const FragmentElement c = mma_c_element(lane, e);
        const bool hi = c.row >= 8;
        const int64_t i = r0 + c.row, j = j0 + n * kMmaN + c.col;
        const bool valid = i < tokens && j < tokens;
        const float prob = flash_bf16_probability(s_acc[n][e], scale, hi ? lse_hi : lse_lo, valid);
        s_acc[n][e] = flash_bf16_score_gradient(prob, dp_acc[n][e], hi ? row_dot_hi : row_dot_lo, valid);
      }
    }
    // dQ += dS K: k-steps of 16 keys, B fragments of K (k = key, n = feature) from shared memory.
#pragma unroll
    for (int ks = 0; ks < kFlashBf16Tile / kMmaK; ++ks) {
      uint32_t a[4];
      accumulators_as_a(a, s_acc, ks);
#pragma unroll
      for (int n = 0; n < kOutN; ++n) {
        uint32_t b0, b1;
        load_b_fragment(b0, b1, keys, ks * kMmaK, n * kMmaN, lane);
        mma_bf16(dq[n], a, b0, b1);
      }
    }
  }
  // dQ, scaled once, into the query part of grad_qkv (bf16 pairs).
#pragma unroll
  for (int n = 0; n < kOutN; ++n) {
#pragma unroll
    for (int e = 0; e < 4; e += 2) {  // values e and e + 1: neighbours in a row
      const FragmentElement c = mma_c_element(lane, e);
      if (r0 + c.row < tokens) {
        *reinterpret_cast<uint32_t*>(p.dq + (r0 + c.row) * ld + n * kMmaN + c.col) =
            pack_bf16(dq[n][e] * scale, dq[n][e + 1] * scale);
      }
    }
  }
}

// dK and dV for a block's 64 key rows, from the dQ kernel's D.
template <int D>
__global__ void __launch_bounds__(kFlashBf16Warps * 32, 1)
    flash_attention_backward_key_bf16(const bf16* __restrict__ qkv, const bf16* __restrict__ out,
                                      const bf16* __restrict__ grad_out, const float* __restrict__ lse,
                                      float* __restrict__ row_dot, bf16* __restrict__ grad_qkv, int64_t tokens,
                                      int64_t heads, float scale) {
  constexpr int kSteps = D / kMmaK, kTilesN = kFlashBf16Tile / kMmaN, kOutN = D / kMmaN;
  __shared__ __align__(16) bf16 queries[kFlashBf16Tile][D + kFlashBf16SharedPad];
  __shared__ __align__(16) bf16 grads[kFlashBf16Tile][D + kFlashBf16SharedPad];
  __shared__ float tile_lse[kFlashBf16Tile], tile_row_dot[kFlashBf16Tile];

  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const HeadPointers p = head_pointers(qkv, out, grad_out, lse, row_dot, grad_qkv, tokens, heads, D);
  const int64_t ld = 3 * heads * D, ld_o = heads * D;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kFlashBf16Rows + warp * kMmaM;

  uint32_t k_frag[kSteps][4], v_frag[kSteps][4];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    load_a_fragment(k_frag[s], p.k, ld, r0, tokens, s * kMmaK, lane);
    load_a_fragment(v_frag[s], p.v, ld, r0, tokens, s * kMmaK, lane);
  }
  float dk[kOutN][4] = {}, dv[kOutN][4] = {};

  for (int64_t i0 = 0; i0 < tokens; i0 += kFlashBf16Tile) {
    __syncthreads();
    stage_tile<D>(queries, p.q, ld, i0, tokens);
    stage_tile<D>(grads, p.d_o, ld_o, i0, tokens);
    for (int x = threadIdx.x; x < kFlashBf16Tile; x += blockDim.x) {
      tile_lse[x] = i0 + x < tokens ? p.lse[i0 + x] : 0.0f;
      tile_row_dot[x] = i0 + x < tokens ? p.row_dot[i0 + x] : 0.0f;
    }
    __syncthreads();

    float s_acc[kTilesN][4] = {}, dp_acc[kTilesN][4] = {};
#pragma unroll
    for (int n = 0; n < kTilesN; ++n) {
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        uint32_t b0, b1;
        load_b_fragment_transposed(b0, b1, queries, n * kMmaN, s * kMmaK, lane);
        mma_bf16(s_acc[n], k_frag[s], b0, b1);
        load_b_fragment_transposed(b0, b1, grads, n * kMmaN, s * kMmaK, lane);
        mma_bf16(dp_acc[n], v_frag[s], b0, b1);
      }
    }
    // P^T into s_acc, dS^T into dp_acc (columns are queries: their lse and D from shared memory).
#pragma unroll
    for (int n = 0; n < kTilesN; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const FragmentElement c = mma_c_element(lane, e);
        const int64_t j = r0 + c.row;
        const int col = n * kMmaN + c.col;
        const bool valid = j < tokens && i0 + col < tokens;
        const float prob = flash_bf16_probability(s_acc[n][e], scale, tile_lse[col], valid);
        dp_acc[n][e] = flash_bf16_score_gradient(prob, dp_acc[n][e], tile_row_dot[col], valid);
        s_acc[n][e] = prob;
      }
    }
    // dV += P^T dO and dK += dS^T Q: k-steps of 16 queries, B fragments (k = query, n = feature) from shared memory.
#pragma unroll
    for (int ks = 0; ks < kFlashBf16Tile / kMmaK; ++ks) {
      uint32_t a_p[4], a_ds[4];
      accumulators_as_a(a_p, s_acc, ks);
      accumulators_as_a(a_ds, dp_acc, ks);
#pragma unroll
      for (int n = 0; n < kOutN; ++n) {
        uint32_t b0, b1;
        load_b_fragment(b0, b1, grads, ks * kMmaK, n * kMmaN, lane);
        mma_bf16(dv[n], a_p, b0, b1);
        load_b_fragment(b0, b1, queries, ks * kMmaK, n * kMmaN, lane);
        mma_bf16(dk[n], a_ds, b0, b1);
      }
    }
  }
#pragma unroll
  for (int n = 0; n < kOutN; ++n) {
#pragma unroll
    for (int e = 0; e < 4; e += 2) {  // values e and e + 1: neighbours in a row
      const FragmentElement c = mma_c_element(lane, e);
      if (r0 + c.row < tokens) {
        const int64_t at = (r0 + c.row) * ld + n * kMmaN + c.col;
        *reinterpret_cast<uint32_t*>(p.dk + at) = pack_bf16(dk[n][e] * scale, dk[n][e + 1] * scale);
        *reinterpret_cast<uint32_t*>(p.dv + at) = pack_bf16(dv[n][e], dv[n][e + 1]);
      }
    }
  }
}

template <int D>
cudaError_t launch(const bf16* qkv, const bf16* out, const bf16* grad_out, const float* lse, float* row_dot,
                   bf16* grad_qkv, int64_t batch, int64_t tokens, int64_t heads, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned int>((tokens + kFlashBf16Rows - 1) / kFlashBf16Rows),
                  static_cast<unsigned int>(heads), static_cast<unsigned int>(batch));
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  // The key kernel reads the query kernel's D: stream order serialises them.
  flash_attention_backward_query_bf16<D>
      <<<grid, kFlashBf16Warps * 32, 0, stream>>>(qkv, out, grad_out, lse, row_dot, grad_qkv, tokens, heads, scale);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  flash_attention_backward_key_bf16<D>
      <<<grid, kFlashBf16Warps * 32, 0, stream>>>(qkv, out, grad_out, lse, row_dot, grad_qkv, tokens, heads, scale);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_flash_attention_backward_bf16(const void* qkv, const void* out, const void* grad_out,
                                                 const float* lse, float* row_dot, void* grad_qkv, int64_t batch,
                                                 int64_t tokens, int64_t heads, int64_t head_dim, cudaStream_t stream) {
  if (!flash_bf16_head_dim_supported(head_dim) || !flash_bf16_pointers_aligned(qkv, out, grad_out, grad_qkv) ||
      heads <= 0 || heads > 65535 || batch > 65535) {
    return cudaErrorInvalidValue;
  }
  if (batch == 0 || tokens == 0) return cudaSuccess;
  const auto* q = static_cast<const bf16*>(qkv);
  const auto* o = static_cast<const bf16*>(out);
  const auto* g = static_cast<const bf16*>(grad_out);
  auto* dq = static_cast<bf16*>(grad_qkv);
  switch (head_dim) {
    case 16:
      return launch<16>(q, o, g, lse, row_dot, dq, batch, tokens, heads, stream);
    case 32:
      return launch<32>(q, o, g, lse, row_dot, dq, batch, tokens, heads, stream);
    default:
      return launch<64>(q, o, g, lse, row_dot, dq, batch, tokens, heads, stream);
  }
}

}  // namespace vitpipe::cuda
