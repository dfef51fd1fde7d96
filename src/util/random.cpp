#include "util/random.h"

#include <bit>
#include <cmath>
#include <numbers>

namespace vitpipe {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t mix_seed(std::initializer_list<uint64_t> parts) {
  uint64_t acc = 0x6a09e667f3bcc909ull;
  for (uint64_t p : parts) {
    uint64_t x = acc ^ p;
    acc = splitmix64(x) ^ std::rotl(acc, 17);
  }
  return acc;
}

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& word : s_) word = splitmix64(x);
}

uint64_t Rng::next_u64() {
  const uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = std::rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Rng::uniform(double low, double high) { return low + (high - low) * uniform(); }

uint64_t Rng::below(uint64_t bound) {
  if (bound <= 1) return 0;
  // Rejection sampling on the top of the range keeps the result unbiased.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do {
    x = next_u64();
  } while (x >= limit);
  return x % bound;
}

double Rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_normal_;
  }
  double u1;
  do {
    u1 = uniform();
  } while (u1 <= 0.0);
  double u2 = uniform();
  double radius = std::sqrt(-2.0 * std::log(u1));
  double angle = 2.0 * std::numbers::pi * u2;
  spare_normal_ = radius * std::sin(angle);
  has_spare_ = true;
  return radius * std::cos(angle);
}

std::array<uint64_t, 6> Rng::state() const {
  // The spare normal is part of the state: without it a resumed run would draw differently.
  return {s_[0], s_[1], s_[2], s_[3], has_spare_ ? 1u : 0u, std::bit_cast<uint64_t>(spare_normal_)};
}

void Rng::set_state(const std::array<uint64_t, 6>& state) {
  for (int i = 0; i < 4; ++i) s_[i] = state[i];
  has_spare_ = state[4] != 0;
  spare_normal_ = std::bit_cast<double>(state[5]);
}

}  // namespace vitpipe
