#include "data/dicom_deflate.h"

#include <zlib.h>

#include <algorithm>
#include <limits>

#include "util/error.h"
#include "util/size_limits.h"

namespace vitpipe {

std::vector<uint8_t> inflate_dicom_data_set(const uint8_t* data, size_t size, const std::string& name) {
  const uint64_t limit = static_cast<uint64_t>(max_image_pixels()) * 8 + (uint64_t{64} << 20);
  z_stream z{};
  VP_REQUIRE(inflateInit2(&z, -MAX_WBITS) == Z_OK, name, ": cannot start inflating the deflated data set");
  std::vector<uint8_t> out;
  size_t consumed = 0;
  int status = Z_OK;
  while (status != Z_STREAM_END) {
    if (z.avail_in == 0 && consumed < size) {
      z.next_in = const_cast<Bytef*>(data + consumed);
      z.avail_in = static_cast<uInt>(std::min<size_t>(size - consumed, std::numeric_limits<uInt>::max()));
      consumed += z.avail_in;
    }
    if (out.size() >= limit) {
      inflateEnd(&z);
      fail(name, ": the deflated data set inflates to more than ", limit,
           " bytes (refused as a possible deflate bomb; set VITPIPE_MAX_IMAGE_PIXELS to raise it)");
    }
    const size_t before = out.size();
    out.resize(static_cast<size_t>(std::min<uint64_t>(limit, std::max<uint64_t>(before * 2, 1 << 16))));
    z.next_out = out.data() + before;
    z.avail_out = static_cast<uInt>(out.size() - before);
    status = inflate(&z, Z_NO_FLUSH);
    out.resize(out.size() - z.avail_out);
    if (status == Z_BUF_ERROR && z.avail_in == 0 && consumed == size) status = Z_DATA_ERROR;  // ends mid-stream
    if (status != Z_OK && status != Z_STREAM_END) {
      const std::string why = z.msg != nullptr ? z.msg : "truncated";
      inflateEnd(&z);
      fail(name, ": the deflated data set is corrupt (zlib: ", why, ")");
    }
  }
  inflateEnd(&z);
  return out;
}

}  // namespace vitpipe
