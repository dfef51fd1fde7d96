// The GEMM throughput this machine reaches right now (best of a few runs of a large square oneDNN matmul):
// the yardstick `vitpipe bench` reports its fraction of.
#pragma once

#include "tensor/dtype.h"

namespace vitpipe::cpu {

double measure_gemm_peak_gflops(DType dtype);

}  // namespace vitpipe::cpu
