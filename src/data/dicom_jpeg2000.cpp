#include "data/dicom_jpeg2000.h"

#include <openjpeg.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "util/error.h"

namespace vitpipe {
namespace {

struct MemoryStream {
  const uint8_t* data;
  size_t size;
  size_t position = 0;
};

OPJ_SIZE_T read_bytes(void* buffer, OPJ_SIZE_T count, void* user) {
  auto* s = static_cast<MemoryStream*>(user);
  if (s->position >= s->size) return static_cast<OPJ_SIZE_T>(-1);
  const size_t n = std::min<size_t>(count, s->size - s->position);
  std::memcpy(buffer, s->data + s->position, n);
  s->position += n;
  return n;
}

OPJ_OFF_T skip_bytes(OPJ_OFF_T count, void* user) {
  auto* s = static_cast<MemoryStream*>(user);
  const auto target = static_cast<OPJ_OFF_T>(s->position) + count;
  if (target < 0 || target > static_cast<OPJ_OFF_T>(s->size)) return -1;
  s->position = static_cast<size_t>(target);
  return count;
}

OPJ_BOOL seek_bytes(OPJ_OFF_T position, void* user) {
  auto* s = static_cast<MemoryStream*>(user);
  if (position < 0 || position > static_cast<OPJ_OFF_T>(s->size)) return OPJ_FALSE;
  s->position = static_cast<size_t>(position);
  return OPJ_TRUE;
}

void remember_error(const char* message, void* user) {
  auto* last = static_cast<std::string*>(user);
  *last = message;
  while (!last->empty() && (last->back() == '\n' || last->back() == ' ')) last->pop_back();
}

void ignore_message(const char*, void*) {}

struct CodecFree {
  void operator()(opj_codec_t* c) const { opj_destroy_codec(c); }
};
struct StreamFree {
  void operator()(opj_stream_t* s) const { opj_stream_destroy(s); }
};
struct ImageFree {
  void operator()(opj_image_t* i) const { opj_image_destroy(i); }
};

bool is_jp2_file(const uint8_t* data, size_t size) {
  static const uint8_t kJp2Signature[12] = {0, 0, 0, 12, 'j', 'P', ' ', ' ', 13, 10, 0x87, 10};
  return size >= sizeof kJp2Signature && std::memcmp(data, kJp2Signature, sizeof kJp2Signature) == 0;
}

}  // namespace

std::vector<uint8_t> decode_jpeg2000_frame(const uint8_t* data, size_t size, const DicomPixelModule& m,
                                           const std::string& name) {
  const std::string where = name + ": JPEG 2000 pixel data";
  std::unique_ptr<opj_codec_t, CodecFree> codec(
      opj_create_decompress(is_jp2_file(data, size) ? OPJ_CODEC_JP2 : OPJ_CODEC_J2K));
  VP_REQUIRE(codec != nullptr, where, ": cannot create an OpenJPEG decoder");
  std::string error = "corrupt codestream";
  opj_set_error_handler(codec.get(), remember_error, &error);
  opj_set_warning_handler(codec.get(), ignore_message, nullptr);
  opj_set_info_handler(codec.get(), ignore_message, nullptr);
  opj_dparameters_t parameters;
  opj_set_default_decoder_parameters(&parameters);
  VP_REQUIRE(opj_setup_decoder(codec.get(), &parameters), where, ": cannot set up the OpenJPEG decoder");

  MemoryStream source{data, size};
  std::unique_ptr<opj_stream_t, StreamFree> stream(opj_stream_create(OPJ_J2K_STREAM_CHUNK_SIZE, OPJ_TRUE));
  VP_REQUIRE(stream != nullptr, where, ": cannot create an OpenJPEG stream");
  opj_stream_set_user_data(stream.get(), &source, nullptr);
  opj_stream_set_user_data_length(stream.get(), size);
  opj_stream_set_read_function(stream.get(), read_bytes);
  opj_stream_set_skip_function(stream.get(), skip_bytes);
  opj_stream_set_seek_function(stream.get(), seek_bytes);

  opj_image_t* raw_image = nullptr;
  const bool header_ok = opj_read_header(stream.get(), codec.get(), &raw_image);
  std::unique_ptr<opj_image_t, ImageFree> image(raw_image);
  VP_REQUIRE(header_ok && image != nullptr, where, ": cannot read the codestream header (", error, ")");
  const int64_t width = static_cast<int64_t>(image->x1) - image->x0;
  const int64_t height = static_cast<int64_t>(image->y1) - image->y0;
  VP_REQUIRE(width == m.columns && height == m.rows && static_cast<int>(image->numcomps) == m.samples_per_pixel, where,
             " is ", width, "x", height, " with ", image->numcomps, " component(s), but (0028,0011) Columns x ",
             "(0028,0010) Rows say ", m.columns, "x", m.rows, " and (0028,0002) Samples per Pixel says ",
             m.samples_per_pixel);
  for (uint32_t c = 0; c < image->numcomps; ++c) {
    const opj_image_comp_t& comp = image->comps[c];
    VP_REQUIRE(comp.dx == 1 && comp.dy == 1 && static_cast<int>(comp.prec) <= m.bits_allocated, where, ": component ",
               c, " has precision ", comp.prec, " and subsampling ", comp.dx, "x", comp.dy,
               "; expected at most (0028,0100) Bits Allocated = ", m.bits_allocated, " bits, not subsampled");
  }
  VP_REQUIRE(opj_decode(codec.get(), stream.get(), image.get()) && opj_end_decompress(codec.get(), stream.get()), where,
             ": cannot decode (", error, ")");

  const auto pixels = static_cast<size_t>(width * height);
  const size_t samples = static_cast<size_t>(m.samples_per_pixel);
  const size_t bytes = static_cast<size_t>(m.bits_allocated / 8);
  std::vector<uint8_t> frame(pixels * samples * bytes);
  for (size_t c = 0; c < samples; ++c) {
    const OPJ_INT32* values = image->comps[c].data;
    VP_REQUIRE(values != nullptr, where, ": component ", c, " decoded to nothing");
    for (size_t i = 0; i < pixels; ++i) {
      const auto word = static_cast<uint32_t>(values[i]);  // two's complement for signed data
      uint8_t* at = frame.data() + (i * samples + c) * bytes;
      at[0] = static_cast<uint8_t>(word & 0xff);
      if (bytes == 2) at[1] = static_cast<uint8_t>((word >> 8) & 0xff);
    }
  }
  return frame;
}

}  // namespace vitpipe
