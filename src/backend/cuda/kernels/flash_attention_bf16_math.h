// The bf16 flash-attention backward on tensor cores (kernels/flash_attention_backward_bf16.cu): its tiling, the
// per-element arithmetic the kernels and the host share, and a host model of the two kernels in their order, which the
// CPU suite holds to a float64 reference and to PyTorch's SDPA backward (tests/cuda/test_flash_attention_bf16_math.cpp)
// and which CudaBackend on fakes runs in the kernels' place.
//
// Operands are bf16, products accumulate in fp32 (mma.sync m16n8k16 bf16 -> f32). Per (batch, head), from the
// forward's lse: S = Q K^T (k-steps of 16 features); P = exp(scale S - lse); dP = dO V^T; D = rowsum(dO * O);
// dS = P (dP - D). P and dS are rounded to bf16 where they become the A operand of the second matmuls (as cuDNN's
// graph rounds them): dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO, each summed over tiles of kFlashBf16Tile keys
// (or queries) in ascending order and, within a tile, over k-steps of 16 in ascending order. No atomics: the dQ kernel
// walks key tiles for its query rows, the dK/dV kernel walks query tiles for its key rows (S and dP computed in both),
// so two runs give the same bits. The fragment layouts of mma.sync (which lane holds which element) are here too, as
// functions the kernels load and store through and the CPU suite checks.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "backend/cuda/kernels/backend_math.h"
#include "backend/cuda/kernels/flash_attention_math.h"
#include "backend/cuda/kernels/host_device.h"

namespace vitpipe::cuda {

constexpr int kMmaM = 16;                                // rows of mma.sync m16n8k16's A and C
constexpr int kMmaN = 8;                                 // columns of its B and C
constexpr int kMmaK = 16;                                // its reduction step
constexpr int kFlashBf16Warps = 4;                       // warps per block, each owning kMmaM rows
constexpr int kFlashBf16Rows = kFlashBf16Warps * kMmaM;  // query rows (dQ kernel) or key rows (dK/dV) per block
constexpr int kFlashBf16Tile = 64;      // keys (dQ kernel) or queries (dK/dV) per tile in shared memory
constexpr int kFlashBf16SharedPad = 8;  // bf16 elements after each shared row: 16 bytes, no bank conflicts

// The head dimensions the kernels are instantiated for (whole k-steps; ViT, DeiT and DINOv2 use 64).
VITPIPE_HOST_DEVICE bool flash_bf16_head_dim_supported(int64_t d) { return d == 16 || d == 32 || d == 64; }

// mma.sync m16n8k16's fragment layouts for bf16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"): the element that lane
// `lane` holds as its value `i`. The kernels load and store fragments only through these, and the CPU suite checks
// them (each element held once; a product through them is the matrix product; accumulators re-packed as A).
struct FragmentElement {
  int row, col;
};
// A, 16 x 16 (rows, k): 8 values a lane, two per register: registers 0..3 hold (g, 2t), (g + 8, 2t), (g, 2t + 8),
// (g + 8, 2t + 8) and the next column, g = lane / 4, t = lane % 4.
VITPIPE_HOST_DEVICE FragmentElement mma_a_element(int lane, int i) {
  return {lane / 4 + (i / 2) % 2 * 8, 2 * (lane % 4) + i % 2 + i / 4 * 8};
}
// B, 16 x 8 (k, columns): 4 values a lane, (2t, g), (2t + 1, g), (2t + 8, g), (2t + 9, g).
VITPIPE_HOST_DEVICE FragmentElement mma_b_element(int lane, int i) {
  return {2 * (lane % 4) + i % 2 + i / 2 * 8, lane / 4};
}
// C and D, 16 x 8 (fp32): 4 values a lane, (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
VITPIPE_HOST_DEVICE FragmentElement mma_c_element(int lane, int i) {
  return {lane / 4 + i / 2 * 8, 2 * (lane % 4) + i % 2};
}
// Accumulators of a 16 x 16 k-step (two C tiles of 8 columns) as A values: A value i of a lane is value
// a_value_source_value(i) of C tile a_value_source_tile(i) (0 or 1) of the same lane.
VITPIPE_HOST_DEVICE int a_value_source_tile(int i) { return i / 4; }
VITPIPE_HOST_DEVICE int a_value_source_value(int i) { return i % 4; }

// ---- The kernels' loads and stores through those layouts, shared with the CPU suite ----
// E is the bf16 element: __nv_bfloat16 on the device, uint16_t (its bits) on the host. The device reads through
// 32-bit and 128-bit loads; the host copies the same bytes.

// One bf16's bits.
template <class E>
VITPIPE_HOST_DEVICE uint16_t fragment_bits(const E* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return bits;
#endif
}
// Two neighbouring bf16 (4-byte aligned) as one register, the first in the low half.
template <class E>
VITPIPE_HOST_DEVICE uint32_t fragment_pair(const E* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint32_t*>(p);
#else
  return static_cast<uint32_t>(fragment_bits(p)) | (static_cast<uint32_t>(fragment_bits(p + 1)) << 16);
#endif
}
// Two bf16 from different rows as one register (low half first).
template <class E>
VITPIPE_HOST_DEVICE uint32_t fragment_gather(const E* lo, const E* hi) {
  return static_cast<uint32_t>(fragment_bits(lo)) | (static_cast<uint32_t>(fragment_bits(hi)) << 16);
}

// The A fragment of rows [r0, r0 + 16) and columns [c0, c0 + 16) of a row-major bf16 matrix (rows `ld` apart), rows at
// or past `rows` read as 0 (mma_a_element: register r holds values 2r and 2r + 1, neighbours in a row).
template <class E>
VITPIPE_HOST_DEVICE void load_a_fragment(uint32_t (&a)[4], const E* m, int64_t ld, int64_t r0, int64_t rows, int c0,
                                         int lane) {
  for (int r = 0; r < 4; ++r) {
    const FragmentElement e = mma_a_element(lane, 2 * r);
    a[r] = r0 + e.row < rows ? fragment_pair(m + (r0 + e.row) * ld + c0 + e.col) : 0u;
  }
}

// The B fragment (k x 8) whose element (k, n) is rows[n0 + n][k0 + k] of a shared tile: K^T, Q^T or dO^T from their
// row-major rows (mma_b_element: register r holds values 2r and 2r + 1, neighbours in a row of the tile).
template <int Row, class E>
VITPIPE_HOST_DEVICE void load_b_fragment_transposed(uint32_t& b0, uint32_t& b1, const E (*rows)[Row], int n0, int k0,
                                                    int lane) {
  const FragmentElement e0 = mma_b_element(lane, 0), e1 = mma_b_element(lane, 2);
  b0 = fragment_pair(&rows[n0 + e0.col][k0 + e0.row]);
  b1 = fragment_pair(&rows[n0 + e1.col][k0 + e1.row]);
}

// The B fragment (k x 8) whose element (k, n) is rows[k0 + k][n0 + n]: K, Q or dO as they are (two rows a register).
template <int Row, class E>
VITPIPE_HOST_DEVICE void load_b_fragment(uint32_t& b0, uint32_t& b1, const E (*rows)[Row], int k0, int n0, int lane) {
  const FragmentElement e0 = mma_b_element(lane, 0), e1 = mma_b_element(lane, 1), e2 = mma_b_element(lane, 2),
                        e3 = mma_b_element(lane, 3);
  b0 = fragment_gather(&rows[k0 + e0.row][n0 + e0.col], &rows[k0 + e1.row][n0 + e1.col]);
  b1 = fragment_gather(&rows[k0 + e2.row][n0 + e2.col], &rows[k0 + e3.row][n0 + e3.col]);
}

// Register r of the A fragment of k-step `ks` (columns 16 ks .. 16 ks + 15: C tiles 2 ks and 2 ks + 1) from a 16 x 8n
// tile's accumulators: its two values, low half first, before rounding to bf16.
VITPIPE_HOST_DEVICE void accumulator_pair_as_a(const float (*acc)[4], int ks, int r, float* lo, float* hi) {
  *lo = acc[2 * ks + a_value_source_tile(2 * r)][a_value_source_value(2 * r)];
  *hi = acc[2 * ks + a_value_source_tile(2 * r + 1)][a_value_source_value(2 * r + 1)];
}

// Rows [row0, row0 + kFlashBf16Tile) of one head's [T, D] slice (rows `ld` apart) into shared rows of D + pad, 16 bytes
// per thread and step (`thread` of `threads`); rows past `rows` are zero. The host checks each 16-byte load's alignment
// (the device's 128-bit load needs it).
template <int D, class E>
VITPIPE_HOST_DEVICE void stage_tile_rows(E (*shared)[D + kFlashBf16SharedPad], const E* m, int64_t ld, int64_t row0,
                                         int64_t rows, unsigned thread, unsigned threads) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  for (int x = thread; x < kFlashBf16Tile * kChunks; x += threads) {
    const int r = x / kChunks, c = (x % kChunks) * 8;
    const bool inside = row0 + r < rows;
#ifdef __CUDA_ARCH__
    uint4 chunk = make_uint4(0u, 0u, 0u, 0u);
    if (inside) chunk = *reinterpret_cast<const uint4*>(m + (row0 + r) * ld + c);
    *reinterpret_cast<uint4*>(&shared[r][c]) = chunk;
#else
    unsigned char chunk[16] = {};
    if (inside) {
      const E* from = m + (row0 + r) * ld + c;
      if (reinterpret_cast<uintptr_t>(from) % 16 != 0 || reinterpret_cast<uintptr_t>(&shared[r][c]) % 16 != 0) {
        throw std::logic_error("stage_tile_rows: a 16-byte load or store off 16-byte alignment");
      }
      std::memcpy(chunk, from, sizeof chunk);
    }
    std::memcpy(&shared[r][c], chunk, sizeof chunk);
#endif
  }
}

// Round to the nearest bf16 (ties to even, as __float2bfloat16_rn), kept as a float.
VITPIPE_HOST_DEVICE float bf16_rounded(float x) { return widen_bf16(round_to_bf16(x)); }

// P of one score accumulator (Q . K over the features, unscaled); 0 past the sequence (a padded key or query).
VITPIPE_HOST_DEVICE float flash_bf16_probability(float score, float scale, float lse, bool valid) {
  return valid ? flash_probability(score * scale, lse) : 0.0f;
}

// dS, unscaled (the scale is applied once, on the finished dQ and dK accumulators); 0 past the sequence.
VITPIPE_HOST_DEVICE float flash_bf16_score_gradient(float probability, float dp, float row_dot, bool valid) {
  return valid ? flash_score_gradient(probability, dp, row_dot) : 0.0f;
}

#ifndef __CUDACC__
// One mma.sync m16n8k16 output element as the host models it: the accumulator plus the 16 products of a k-step, summed
// in k order in fp32. (The tensor core adds the exact products in an order and precision of its own: the model
// matches the device up to fp32 rounding inside a k-step, and exactly in the order of k-steps and tiles.)
template <class A, class B>
inline float mma_k_step(float accumulator, const A& a, const B& b, int64_t k0) {
  float step = 0.0f;
  for (int64_t k = k0; k < k0 + kMmaK; ++k) step += a(k) * b(k);
  return accumulator + step;
}

// One head's backward on the host, as the two kernels compute it. q, k, v: rows `ld` apart (the packed layout), o and
// d_o rows `ld_o` apart, all holding bf16 values; lse [T]. Writes row_dot [T] (D) and dq, dk, dv [T, d] contiguous in
// fp32 (the kernels round them to bf16 when they store).
inline void flash_backward_head_bf16(const float* q, const float* k, const float* v, const float* o, const float* d_o,
                                     const float* lse, int64_t tokens, int64_t d, int64_t ld, int64_t ld_o, float scale,
                                     float* row_dot, float* dq, float* dk, float* dv) {
  const int64_t tiles = (tokens + kFlashBf16Tile - 1) / kFlashBf16Tile;
  // Scores and score gradients of one (query, key) pair as both kernels recompute them, k-step by k-step.
  const auto score = [&](int64_t i, int64_t j) {
    float s = 0.0f;
    for (int64_t k0 = 0; k0 < d; k0 += kMmaK) {
      s = mma_k_step(
          s, [&](int64_t e) { return q[i * ld + e]; }, [&](int64_t e) { return k[j * ld + e]; }, k0);
    }
    return s;
  };
  const auto score_gradient_input = [&](int64_t i, int64_t j) {
    float dp = 0.0f;
    for (int64_t k0 = 0; k0 < d; k0 += kMmaK) {
      dp = mma_k_step(
          dp, [&](int64_t e) { return d_o[i * ld_o + e]; }, [&](int64_t e) { return v[j * ld + e]; }, k0);
    }
    return dp;
  };
  // D_i: the dQ kernel's warp sums each row in its butterfly.
  for (int64_t i = 0; i < tokens; ++i) {
    row_dot[i] = warp_sum_emulated([&](int64_t e) { return d_o[i * ld_o + e] * o[i * ld_o + e]; }, d);
  }
  // P and dS of a tile, rounded to bf16 as the A operands of the second matmuls; 0 past the sequence.
  const auto p_and_ds = [&](int64_t i, int64_t j, float* p, float* ds) {
    const bool valid = i < tokens && j < tokens;
    const float s = valid ? score(i, j) : 0.0f, dp = valid ? score_gradient_input(i, j) : 0.0f;
    const float prob = flash_bf16_probability(s, scale, valid ? lse[i] : 0.0f, valid);
    *p = bf16_rounded(prob);
    *ds = bf16_rounded(flash_bf16_score_gradient(prob, dp, valid ? row_dot[i] : 0.0f, valid));
  };
  std::vector<float> p(static_cast<size_t>(kFlashBf16Tile)), ds(static_cast<size_t>(kFlashBf16Tile));
  // The dQ kernel: per query row, key tiles in order, each as k-steps of 16 keys.
  for (int64_t i = 0; i < tokens; ++i) {
    for (int64_t e = 0; e < d; ++e) dq[i * d + e] = 0.0f;
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t j0 = t * kFlashBf16Tile;
      for (int64_t j = 0; j < kFlashBf16Tile; ++j)
        p_and_ds(i, j0 + j, &p[static_cast<size_t>(j)], &ds[static_cast<size_t>(j)]);
      for (int64_t e = 0; e < d; ++e) {
        float acc = dq[i * d + e];
        for (int64_t k0 = 0; k0 < kFlashBf16Tile; k0 += kMmaK) {
          acc = mma_k_step(
              acc, [&](int64_t j) { return ds[static_cast<size_t>(j)]; },
              [&](int64_t j) { return j0 + j < tokens ? k[(j0 + j) * ld + e] : 0.0f; }, k0);
        }
        dq[i * d + e] = acc;
      }
    }
    for (int64_t e = 0; e < d; ++e) dq[i * d + e] *= scale;
  }
  // The dK/dV kernel: per key row, query tiles in order, each as k-steps of 16 queries.
  for (int64_t j = 0; j < tokens; ++j) {
    for (int64_t e = 0; e < d; ++e) dk[j * d + e] = dv[j * d + e] = 0.0f;
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t i0 = t * kFlashBf16Tile;
      for (int64_t i = 0; i < kFlashBf16Tile; ++i)
        p_and_ds(i0 + i, j, &p[static_cast<size_t>(i)], &ds[static_cast<size_t>(i)]);
      for (int64_t e = 0; e < d; ++e) {
        float acc_v = dv[j * d + e], acc_k = dk[j * d + e];
        for (int64_t k0 = 0; k0 < kFlashBf16Tile; k0 += kMmaK) {
          acc_v = mma_k_step(
              acc_v, [&](int64_t i) { return p[static_cast<size_t>(i)]; },
              [&](int64_t i) { return i0 + i < tokens ? d_o[(i0 + i) * ld_o + e] : 0.0f; }, k0);
          acc_k = mma_k_step(
              acc_k, [&](int64_t i) { return ds[static_cast<size_t>(i)]; },
              [&](int64_t i) { return i0 + i < tokens ? q[(i0 + i) * ld + e] : 0.0f; }, k0);
        }
        dv[j * d + e] = acc_v;
        dk[j * d + e] = acc_k;
      }
    }
    for (int64_t e = 0; e < d; ++e) dk[j * d + e] *= scale;
  }
}
#endif

}  // namespace vitpipe::cuda
