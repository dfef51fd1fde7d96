#include "explain/npy_file.h"

#include <string>

#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe {

void write_npy_float32(const std::filesystem::path& path, const std::vector<int64_t>& shape,
                       const std::vector<float>& values) {
  int64_t count = 1;
  std::string dims;
  for (int64_t d : shape) {
    count *= d;
    dims += std::to_string(d) + ",";
  }
  if (shape.size() > 1) dims.pop_back();  // (n,) keeps its comma, (h, w) does not need one
  VP_REQUIRE(count == static_cast<int64_t>(values.size()), path.string(), ": npy shape does not match the values");
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic (6) + version (2) + length (2) + header, padded with spaces and a newline to a multiple of 64.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  const uint16_t length = static_cast<uint16_t>(header.size());
  std::string prefix = "\x93NUMPY";
  prefix += static_cast<char>(1);
  prefix += static_cast<char>(0);
  prefix += static_cast<char>(length & 0xff);
  prefix += static_cast<char>(length >> 8);
  AtomicFileWriter out(path);
  out.write(prefix + header);
  out.write(values.data(), values.size() * sizeof(float));  // little-endian: x86-64
  out.commit();
}

}  // namespace vitpipe
