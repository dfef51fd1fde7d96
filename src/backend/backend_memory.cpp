// backend.h's memory helpers: what every caller of allocate() and the host copies would otherwise write again.
#include "backend/backend.h"

namespace vitpipe {

Tensor allocate_zeros(Backend& backend, const Shape& shape, DType dtype) {
  Tensor t = backend.allocate(shape, dtype);
  if (t.numel() > 0) backend.zero(t);
  return t;
}

Tensor to_host(Backend& backend, const Tensor& device) {
  Tensor host = Tensor::empty(device.shape(), device.dtype());
  if (host.numel() > 0) backend.copy_to_host(device, host);
  return host;
}

Tensor to_backend(Backend& backend, const Tensor& host) {
  Tensor device = backend.allocate(host.shape(), host.dtype());
  if (device.numel() > 0) backend.copy_from_host(host, device);
  return device;
}

}  // namespace vitpipe
