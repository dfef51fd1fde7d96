// Deterministic, portable random numbers: xoshiro256** seeded through splitmix64. Streams are derived from tuples
// such as (seed, epoch, sample index), so a draw never depends on thread count, process count or pipeline layout.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

namespace vitpipe {

// Mixes several integers into one well-scrambled 64-bit seed.
uint64_t mix_seed(std::initializer_list<uint64_t> parts);

class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  Rng(std::initializer_list<uint64_t> parts) : Rng(mix_seed(parts)) {}

  uint64_t next_u64();
  double uniform();                         // [0, 1)
  double uniform(double low, double high);  // [low, high)
  uint64_t below(uint64_t bound);           // [0, bound), unbiased
  double normal();                          // standard normal (Box-Muller)
  double normal(double mean, double stddev) { return mean + stddev * normal(); }

  // Saved and restored with training checkpoints.
  std::array<uint64_t, 6> state() const;
  void set_state(const std::array<uint64_t, 6>& state);

 private:
  std::array<uint64_t, 4> s_{};
  double spare_normal_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace vitpipe
