// The optimizer ops of the CPU backend. Not level-specific code: every level forwards to the one baseline copy of
// the loops (backend/cpu/optimizer_kernels.cpp), so an update's bits do not depend on the CPU level.
#include "backend/cpu/kernels/cpu_backend.h"
#include "backend/cpu/optimizer_kernels.h"

namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS {

void CpuBackend::adamw_update(const OptimizerStep& step, const OptimizerScalars& s) { cpu::adamw_update(step, s); }
void CpuBackend::lamb_moments(const OptimizerStep& step, const OptimizerScalars& s, std::span<double> squares) {
  cpu::lamb_moments(step, s, squares);
}
void CpuBackend::lamb_update(const OptimizerStep& step, const OptimizerScalars& s) { cpu::lamb_update(step, s); }
void CpuBackend::sgd_update(const OptimizerStep& step, const OptimizerScalars& s) { cpu::sgd_update(step, s); }
double CpuBackend::sum_of_squares(const Tensor& x, std::span<const int64_t> bounds) {
  return cpu::sum_of_squares(x, bounds);
}
void CpuBackend::zero(const Tensor& t) { cpu::zero(t); }
void CpuBackend::copy_to_host(const Tensor& device, const Tensor& host) {
  cpu::copy_tensor(device, host, "copy_to_host");
}
void CpuBackend::copy_from_host(const Tensor& host, const Tensor& device) {
  cpu::copy_tensor(host, device, "copy_from_host");
}

}  // namespace vitpipe::cpu::VITPIPE_CPU_LEVEL_NS
