// A bump arena over one block of device memory that the CUDA backend takes once (cudaMalloc at construction) and
// never frees before its end: the scratch of column-sum partials, loss elements and LoRA's intermediate. Each op
// resets it and takes what it needs; ops run one after another on the backend's one stream, so one op's scratch is
// free again when the next op's kernels run. Plain C++ (offsets and alignment only), tested on the CPU
// (tests/cuda/test_device_arena.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace vitpipe::cuda {

class DeviceArena {
 public:
  static constexpr size_t kAlignment = 256;  // cudaMalloc's own alignment: every slice suits any kernel or library

  DeviceArena() = default;
  DeviceArena(void* base, size_t capacity) : base_(static_cast<char*>(base)), capacity_(capacity) {}

  // `bytes` (rounded up to kAlignment) more; throws std::length_error saying how much was asked and what is left.
  void* take(size_t bytes, const char* what) {
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded < bytes || rounded > capacity_ - used_) {
      throw std::length_error(std::string("device scratch arena: ") + what + " needs " + std::to_string(bytes) +
                              " bytes, " + std::to_string(capacity_ - used_) + " of " + std::to_string(capacity_) +
                              " are left");
    }
    void* p = base_ + used_;
    used_ += rounded;
    if (used_ > high_water_) high_water_ = used_;
    return p;
  }
  template <class T>
  T* take_array(int64_t count, const char* what) {
    return static_cast<T*>(take(static_cast<size_t>(count < 0 ? 0 : count) * sizeof(T), what));
  }
  // Whether take(bytes) would succeed.
  bool fits(size_t bytes) const {
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    return rounded >= bytes && rounded <= capacity_ - used_;
  }
  void reset() { used_ = 0; }

  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  size_t high_water() const { return high_water_; }  // the most any op took: the arena's size in the memory model
  void* base() const { return base_; }

 private:
  char* base_ = nullptr;
  size_t capacity_ = 0, used_ = 0, high_water_ = 0;
};

}  // namespace vitpipe::cuda
