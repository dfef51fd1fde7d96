// Tensor: a shape, an element type, a device and a pointer into shared storage. Contiguous row-major; views share
// storage (reshape, slices along the first dimension). No autograd: gradients are explicit buffers (see model/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace vitpipe {

using Shape = std::vector<int64_t>;

std::string shape_string(const Shape& shape);  // "[2, 197, 768]"
int64_t shape_numel(const Shape& shape);

enum class Device : uint8_t { cpu, cuda };

constexpr size_t kTensorAlignment = 64;  // a cache line and an AVX-512 vector

class Tensor {
 public:
  Tensor() = default;

  // Fresh aligned storage, uninitialised / zeroed.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  // A view of memory someone else owns; `keep_alive` (e.g. a MappedFile) lives as long as any view.
  static Tensor wrap(void* data, const Shape& shape, DType dtype, std::shared_ptr<const void> keep_alive = nullptr);
  // Memory of another device (a GPU backend's allocate()): only that backend's ops and its host copies may touch it.
  // The host accessors below (f32, u16, clone, copy_from, fill_zero, to) refuse such a tensor, so a host read of
  // device memory fails with a message instead of faulting or reading garbage.
  static Tensor wrap_device(void* data, const Shape& shape, DType dtype, Device device,
                            std::shared_ptr<const void> keep_alive);

  bool defined() const { return data_ != nullptr || numel() == 0; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t axis) const;  // negative counts from the end
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }

  void* raw() const { return data_; }
  template <class T>
  T* data() const {
    return static_cast<T*>(data_);
  }
  float* f32() const;     // checks dtype (and that the memory is the host's)
  uint16_t* u16() const;  // bf16 or f16 bits; checks dtype (and that the memory is the host's)

  Tensor view(const Shape& shape) const;           // same elements, new shape
  Tensor slice(int64_t begin, int64_t end) const;  // rows [begin, end) of the first dimension
  Tensor clone() const;                            // deep copy
  void copy_from(const Tensor& other) const;       // same element count and dtype
  void fill_zero() const;

  // A new tensor of another dtype (fp32 <-> bf16/f16 and identity).
  Tensor to(DType dtype) const;

 private:
  void require_host(const char* what) const;

  std::shared_ptr<const void> storage_;
  void* data_ = nullptr;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
};

}  // namespace vitpipe
