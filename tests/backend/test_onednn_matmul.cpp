// MatmulCache's packed weights (MatmulShape::pack_b): the product is the one with B as it is, and a prepared
// matmul that packs refuses a B that is not its packed copy (it would read plain rows as blocks).
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/onednn_matmul.h"
#include "util/error.h"
#include "util/random.h"

namespace vitpipe {
namespace {

using cpu::MatmulCache;
using cpu::MatmulShape;

// A linear layer's forward, weights [n, k]: B[k][n] = weight[n][k].
MatmulShape linear_shape(int64_t m, int64_t n, int64_t k, bool pack) {
  MatmulShape s;
  s.m = m, s.n = n, s.k = k;
  s.a_row = k, s.a_col = 1;
  s.b_row = 1, s.b_col = k;
  s.c_row = n;
  s.pack_b = pack;
  return s;
}

std::vector<float> random_floats(size_t count, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(count);
  for (float& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// max |a - b| / max |b|
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  }
  return diff / scale;
}

struct Problem {
  int64_t m, n, k;
  std::vector<float> a, weight;
  Problem(int64_t rows, int64_t out, int64_t in, uint64_t seed)
      : m(rows), n(out), k(in), a(random_floats(m * k, seed)), weight(random_floats(n * k, seed + 1)) {}
  std::vector<float> product(MatmulCache& cache, const std::vector<float>& w, bool pack) const {
    std::vector<float> c(static_cast<size_t>(m * n));
    cache.run(linear_shape(m, n, k, pack), a.data(), w.data(), c.data());
    return c;
  }
};

TEST(MatmulCache, PackedWeightGivesTheSameProduct) {
  const Problem p(300, 45, 70, 1);
  MatmulCache cache;
  EXPECT_LT(relative_difference(p.product(cache, p.weight, true), p.product(cache, p.weight, false)), 1e-6);
  // A second weight through the same cached primitive: packed again, not the first one's copy reused.
  const std::vector<float> other = random_floats(p.weight.size(), 3);
  EXPECT_LT(relative_difference(p.product(cache, other, true), p.product(cache, other, false)), 1e-6);
}

TEST(MatmulCache, PreparedMatmulTakesOnlyItsPackedWeight) {
  const Problem p(64, 45, 70, 4);
  const int64_t m = p.m, n = p.n, k = p.k;
  const std::vector<float>&a = p.a, &weight = p.weight;
  MatmulCache cache;
  const std::vector<float> expected = p.product(cache, weight, false);
  std::vector<float> got(expected.size());
  const MatmulCache::Prepared& prepared = cache.prepare(linear_shape(m, n, k, true));
  const void* b = cache.pack_b(prepared, weight.data());
  if (b == weight.data()) GTEST_SKIP() << "oneDNN keeps this B's layout: nothing is packed";
#pragma omp parallel num_threads(1)
  cache.run_prepared(prepared, a.data(), b, got.data());
  EXPECT_LT(relative_difference(got, expected), 1e-6);
  bool refused = false;
#pragma omp parallel num_threads(1)
  {
    try {
      cache.run_prepared(prepared, a.data(), weight.data(), got.data());
    } catch (const Error& e) {
      refused = std::string(e.what()).find("pack_b") != std::string::npos;
    }
  }
  EXPECT_TRUE(refused);
}

}  // namespace
}  // namespace vitpipe
