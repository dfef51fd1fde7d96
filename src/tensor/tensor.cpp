#include "tensor/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "util/error.h"

namespace vitpipe {
namespace {
constexpr size_t kHugePageBytes = size_t{2} << 20;
}

std::string shape_string(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    VP_REQUIRE(d >= 0, "negative dimension in shape ", shape_string(shape));
    n *= d;
  }
  return n;
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  size_t bytes = t.nbytes();
  // Large buffers (activations, weights) go on 2 MiB pages where the kernel allows it on request
  // (transparent_hugepage=madvise): the kernels stream through them, and 4 KiB pages cost TLB misses.
  const bool huge = bytes >= kHugePageBytes;
  const size_t alignment = huge ? kHugePageBytes : kTensorAlignment;
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* memory = std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
  if (memory != nullptr && huge) ::madvise(memory, rounded, MADV_HUGEPAGE);
  VP_REQUIRE(memory != nullptr, "out of memory allocating ", bytes, " bytes for a tensor of shape ",
             shape_string(shape));
  t.storage_ = std::shared_ptr<const void>(memory, [](const void* p) { std::free(const_cast<void*>(p)); });
  t.data_ = memory;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill_zero();
  return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, std::shared_ptr<const void> keep_alive) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.data_ = data;
  t.storage_ = std::move(keep_alive);
  return t;
}

Tensor Tensor::wrap_device(void* data, const Shape& shape, DType dtype, Device device,
                           std::shared_ptr<const void> keep_alive) {
  Tensor t = wrap(data, shape, dtype, std::move(keep_alive));
  t.device_ = device;
  return t;
}

void Tensor::require_host(const char* what) const {
  VP_REQUIRE(device_ == Device::cpu, "internal: ", what, " of a tensor in device memory (shape ", shape_string(shape_),
             "): the host reads and writes it only through its backend's copy_to_host / copy_from_host");
}

int64_t Tensor::dim(int64_t axis) const {
  int64_t r = rank();
  if (axis < 0) axis += r;
  VP_REQUIRE(axis >= 0 && axis < r, "axis ", axis, " out of range for a tensor of shape ", shape_string(shape_));
  return shape_[static_cast<size_t>(axis)];
}

float* Tensor::f32() const {
  VP_REQUIRE(dtype_ == DType::f32, "expected an F32 tensor, got ", dtype_name(dtype_));
  require_host("f32()");
  return static_cast<float*>(data_);
}

uint16_t* Tensor::u16() const {
  VP_REQUIRE(dtype_ == DType::bf16 || dtype_ == DType::f16, "expected a BF16 or F16 tensor, got ", dtype_name(dtype_));
  require_host("u16()");
  return static_cast<uint16_t*>(data_);
}

Tensor Tensor::view(const Shape& shape) const {
  VP_REQUIRE(shape_numel(shape) == numel_, "cannot view a tensor of shape ", shape_string(shape_), " as ",
             shape_string(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  VP_REQUIRE(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "slice [", begin, ", ", end,
             ") out of range for shape ", shape_string(shape_));
  Tensor t = *this;
  int64_t row = shape_[0] == 0 ? 0 : numel_ / shape_[0];
  t.shape_[0] = end - begin;
  t.numel_ = row * (end - begin);
  t.data_ = static_cast<char*>(data_) + static_cast<size_t>(begin * row) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::clone() const {
  require_host("clone()");
  Tensor t = empty(shape_, dtype_);
  if (nbytes() > 0) std::memcpy(t.data_, data_, nbytes());
  return t;
}

void Tensor::copy_from(const Tensor& other) const {
  VP_REQUIRE(other.numel_ == numel_ && other.dtype_ == dtype_, "copy: shape/dtype mismatch ",
             shape_string(other.shape_), " ", dtype_name(other.dtype_), " -> ", shape_string(shape_), " ",
             dtype_name(dtype_));
  require_host("copy_from()");
  other.require_host("copy_from()");
  if (nbytes() > 0 && other.data_ != data_) std::memmove(data_, other.data_, nbytes());
}

void Tensor::fill_zero() const {
  require_host("fill_zero()");
  if (nbytes() > 0) std::memset(data_, 0, nbytes());
}

Tensor Tensor::to(DType dtype) const {
  require_host("to()");
  if (dtype == dtype_) return clone();
  Tensor out = empty(shape_, dtype);
  size_t n = static_cast<size_t>(numel_);
  if (dtype_ == DType::f32 && dtype == DType::bf16) {
    convert_f32_to_bf16(f32(), out.u16(), n);
  } else if (dtype_ == DType::f32 && dtype == DType::f16) {
    convert_f32_to_f16(f32(), out.u16(), n);
  } else if (dtype_ == DType::bf16 && dtype == DType::f32) {
    convert_bf16_to_f32(u16(), out.f32(), n);
  } else if (dtype_ == DType::f16 && dtype == DType::f32) {
    convert_f16_to_f32(u16(), out.f32(), n);
  } else if (dtype_ == DType::f64 && dtype == DType::f32) {
    const double* src = data<double>();
    float* dst = out.f32();
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
  } else {
    fail("no conversion from ", dtype_name(dtype_), " to ", dtype_name(dtype));
  }
  return out;
}

}  // namespace vitpipe
