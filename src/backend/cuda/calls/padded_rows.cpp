#include "backend/cuda/calls/padded_rows.h"

#include <stdexcept>
#include <string>

namespace vitpipe::cuda {

void require_padded_rows(const char* what, const char* name, const RowMajorMatrix& m) {
  if (row_stride_fits_the_library(m.stride(), m.type)) return;
  throw std::invalid_argument(std::string(what) + ": " + name + " [" + std::to_string(m.rows) + ", " +
                              std::to_string(m.cols) + "] of " + element_type_name(m.type) + " has rows " +
                              std::to_string(m.stride() * element_bytes(m.type)) +
                              " bytes apart, no whole number of 16-byte units: store it with rows of " +
                              std::to_string(padded_row_stride(m.stride(), m.type)) + " (padded_rows.h)");
}

}  // namespace vitpipe::cuda
