// Runs the bf16 tensor-core flash-attention backward's host model (kernels/flash_attention_bf16_math.h) on a case
// written by tests/cuda/check_flash_bf16_torch.py and prints how far its dQ, dK and dV are from PyTorch's.
// Input (little-endian): int64 tokens, heads, head_dim; then float32 arrays q, k, v, o, d_o [heads, tokens, head_dim],
// lse [heads, tokens], and PyTorch's dq, dk, dv [heads, tokens, head_dim]. Output: one line
// "dq <rel> dk <rel> dv <rel>" (max |model - torch| / max |torch|). Exit 1 on a malformed file.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <vector>

#include "backend/cuda/kernels/flash_attention_bf16_math.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: flash_bf16_probe CASE_FILE\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  int64_t header[3] = {};
  if (!in.read(reinterpret_cast<char*>(header), sizeof header)) {
    std::fprintf(stderr, "%s: no header (three int64: tokens, heads, head_dim)\n", argv[1]);
    return 1;
  }
  const int64_t T = header[0], H = header[1], d = header[2];
  if (T <= 0 || H <= 0 || !vitpipe::cuda::flash_bf16_head_dim_supported(d) || T > 100000 || H > 1024) {
    std::fprintf(stderr, "%s: header: tokens %lld, heads %lld, head_dim %lld out of range\n", argv[1],
                 static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(d));
    return 1;
  }
  const size_t n = static_cast<size_t>(H * T * d);
  const auto read = [&](size_t count) {
    std::vector<float> v(count);
    if (!in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(float)))) v.clear();
    return v;
  };
  const std::vector<float> q = read(n), k = read(n), v = read(n), o = read(n), d_o = read(n),
                           lse = read(static_cast<size_t>(H * T)), dq_t = read(n), dk_t = read(n), dv_t = read(n);
  if (dv_t.empty() || in.peek() != EOF) {
    std::fprintf(stderr, "%s: expected exactly 3 int64 and %zu float32 after them\n", argv[1], 8 * n + H * T);
    return 1;
  }
  std::vector<float> row_dot(static_cast<size_t>(T)), dq(n), dk(n), dv(n);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t h = 0; h < H; ++h) {
    const size_t at = static_cast<size_t>(h * T * d);
    vitpipe::cuda::flash_backward_head_bf16(&q[at], &k[at], &v[at], &o[at], &d_o[at], &lse[static_cast<size_t>(h * T)],
                                            T, d, d, d, scale, row_dot.data(), &dq[at], &dk[at], &dv[at]);
  }
  const auto relative = [&](const std::vector<float>& a, const std::vector<float>& e) {
    double diff = 0.0, top = 1e-3;
    for (size_t i = 0; i < e.size(); ++i) {
      // The kernels store bf16: compare what they would store.
      const float stored = vitpipe::cuda::bf16_rounded(a[i]);
      diff = std::fmax(diff, std::fabs(static_cast<double>(stored) - e[i]));
      top = std::fmax(top, std::fabs(static_cast<double>(e[i])));
    }
    return diff / top;
  };
  std::printf("dq %.6g dk %.6g dv %.6g\n", relative(dq, dq_t), relative(dk, dk_t), relative(dv, dv_t));
  return 0;
}
