// Hostile sizes in data files, refused before anything is allocated for them: an image header claiming 100000 x
// 100000 pixels (PNG) or 65000 x 65000 (JPEG), a CSV record of 1 GB (gzip'd: 1 MB on disk), a split list line of the
// same; and the environment variables that raise the limits where real data could need more.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <optional>
#include <vector>

#include "data/csv_table.h"
#include "data/dicom_decoder.h"
#include "data/image.h"
#include "data/png_decoder.h"
#include "test_helpers.h"
#include "util/atomic_file.h"

namespace vitpipe {
namespace {

using testing::expect_error;
using testing::TempDir;
using testing::write_file;
namespace fs = std::filesystem;

// Sets an environment variable for the scope (unset again after).
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnvironment() { ::unsetenv(name_); }

 private:
  const char* name_;
};

void append_u32_be(std::string& out, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((value >> shift) & 0xFF));
}

void append_chunk(std::string& png, const char* type, const std::string& data) {
  append_u32_be(png, static_cast<uint32_t>(data.size()));
  std::string body = std::string(type, 4) + data;
  png += body;
  append_u32_be(png, static_cast<uint32_t>(
                         crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()))));
}

// A valid 8-bit gray PNG of `width` x `height` whose IDAT holds only the first row's worth of data: enough for the
// header to be read, far too little to be decoded.
std::string png_header_claiming(uint32_t width, uint32_t height) {
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  append_u32_be(ihdr, width);
  append_u32_be(ihdr, height);
  ihdr += std::string("\x08\x00\x00\x00\x00", 5);  // depth 8, gray, deflate, adaptive filter, no interlace
  append_chunk(png, "IHDR", ihdr);
  const std::string row(1 + 16, '\0');
  std::vector<Bytef> packed(compressBound(static_cast<uLong>(row.size())));
  uLongf packed_size = static_cast<uLongf>(packed.size());
  compress(packed.data(), &packed_size, reinterpret_cast<const Bytef*>(row.data()), static_cast<uLong>(row.size()));
  append_chunk(png, "IDAT", std::string(reinterpret_cast<const char*>(packed.data()), packed_size));
  append_chunk(png, "IEND", "");
  return png;
}

// A complete 16 x 16 gray PNG (decodable).
std::string small_png() {
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  append_u32_be(ihdr, 16);
  append_u32_be(ihdr, 16);
  ihdr += std::string("\x08\x00\x00\x00\x00", 5);
  append_chunk(png, "IHDR", ihdr);
  std::string rows;
  for (int y = 0; y < 16; ++y) rows += std::string(1, '\0') + std::string(16, static_cast<char>(y * 16));
  std::vector<Bytef> packed(compressBound(static_cast<uLong>(rows.size())));
  uLongf packed_size = static_cast<uLongf>(packed.size());
  compress(packed.data(), &packed_size, reinterpret_cast<const Bytef*>(rows.data()), static_cast<uLong>(rows.size()));
  append_chunk(png, "IDAT", std::string(reinterpret_cast<const char*>(packed.data()), packed_size));
  append_chunk(png, "IEND", "");
  return png;
}

DecodedImage decode(const std::string& bytes, const std::string& name) {
  return decode_image_memory_keep_gray(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), name);
}

TEST(HostileSizes, PngHeaderOf100000By100000PixelsIsRefusedBeforeDecoding) {
  const std::string png = png_header_claiming(100000, 100000);
  expect_error([&] { decode(png, "bomb.png"); },
               {"bomb.png: PNG is 100000x100000 = 10000000000 pixels, more than the limit of 268435456",
                "decompression bomb", "VITPIPE_MAX_IMAGE_PIXELS"});
}

TEST(HostileSizes, JpegHeaderOf65000By65000PixelsIsRefusedBeforeDecoding) {
  // A real JPEG whose SOF0 claims 65000 x 65000 (JPEG's sizes are 16-bit).
  std::string jpeg = read_text_file(testing::source_dir() / "tests" / "image" / "fixtures" / "rgb_adobe.jpg");
  size_t sof = std::string::npos;
  for (size_t i = 0; i + 9 < jpeg.size(); ++i) {
    const auto marker = static_cast<unsigned char>(jpeg[i + 1]);
    if (static_cast<unsigned char>(jpeg[i]) == 0xFF && (marker == 0xC0 || marker == 0xC1 || marker == 0xC2)) {
      sof = i;
      break;
    }
  }
  ASSERT_NE(sof, std::string::npos);
  for (size_t at : {sof + 5, sof + 7}) {  // height, width: big-endian 16-bit
    jpeg[at] = static_cast<char>(65000 >> 8);
    jpeg[at + 1] = static_cast<char>(65000 & 0xFF);
  }
  expect_error([&] { decode(jpeg, "bomb.jpg"); },
               {"bomb.jpg", "JPEG is 65000x65000 = 4225000000 pixels, more than the limit of 268435456",
                "VITPIPE_MAX_IMAGE_PIXELS"});
}

void append_u16_le(std::string& out, uint16_t value) {
  out.push_back(static_cast<char>(value & 0xFF));
  out.push_back(static_cast<char>(value >> 8));
}

void append_u32_le(std::string& out, uint32_t value) {
  for (int shift = 0; shift < 32; shift += 8) out.push_back(static_cast<char>((value >> shift) & 0xFF));
}

// An explicit VR little endian element with a 2-byte length (US, CS, UI).
void append_short_element(std::string& out, uint16_t group, uint16_t element, const char* vr, std::string value) {
  if (value.size() % 2) value.push_back(vr[0] == 'U' && vr[1] == 'I' ? '\0' : ' ');
  append_u16_le(out, group);
  append_u16_le(out, element);
  out.append(vr, 2);
  append_u16_le(out, static_cast<uint16_t>(value.size()));
  out += value;
}

std::string us(uint16_t value) {
  std::string out;
  append_u16_le(out, value);
  return out;
}

// A 16 x 16 8-bit DX image whose Content Sequence (0040,A730) nests `depth` sequences, each in an item of the one
// above: of undefined length (delimiters) in explicit VR, or of defined length in implicit VR (the dictionary says
// SQ), as a hostile sender writes it.
std::string nested_dicom(int depth, bool implicit_vr) {
  const std::string syntax = implicit_vr ? "1.2.840.10008.1.2" : "1.2.840.10008.1.2.1";
  std::string meta;
  append_u16_le(meta, 0x0002);
  append_u16_le(meta, 0x0001);
  meta += std::string("OB\0\0", 4);
  append_u32_le(meta, 2);
  meta += std::string("\0\1", 2);
  append_short_element(meta, 0x0002, 0x0002, "UI", "1.2.840.10008.5.1.4.1.1.1.1");
  append_short_element(meta, 0x0002, 0x0003, "UI", "1.2.3.4.5");
  append_short_element(meta, 0x0002, 0x0010, "UI", syntax);
  std::string file(128, '\0');
  file += "DICM";
  append_short_element(file, 0x0002, 0x0000, "UL", "");
  file.resize(file.size() - 2);
  append_u16_le(file, 4);
  append_u32_le(file, static_cast<uint32_t>(meta.size()));
  file += meta;
  // The data set's elements: explicit VR as above; implicit VR: tag and a 4-byte length.
  const auto element = [&](std::string& out, uint16_t group, uint16_t number, const char* vr, std::string value) {
    if (!implicit_vr) return append_short_element(out, group, number, vr, value);
    if (value.size() % 2) value.push_back(vr[0] == 'U' && vr[1] == 'I' ? '\0' : ' ');
    append_u16_le(out, group);
    append_u16_le(out, number);
    append_u32_le(out, static_cast<uint32_t>(value.size()));
    out += value;
  };
  std::string data;
  element(data, 0x0008, 0x0016, "UI", "1.2.840.10008.5.1.4.1.1.1.1");
  element(data, 0x0008, 0x0018, "UI", "1.2.3.4.5");
  if (implicit_vr) {
    std::string inner;  // built from the innermost out: each level's length is its content's
    element(inner, 0x0040, 0xA160, "UT", "x");
    for (int level = 0; level < depth; ++level) {
      std::string item;
      append_u16_le(item, 0xFFFE);
      append_u16_le(item, 0xE000);
      append_u32_le(item, static_cast<uint32_t>(inner.size()));
      item += inner;
      std::string sequence;
      append_u16_le(sequence, 0x0040);
      append_u16_le(sequence, 0xA730);
      append_u32_le(sequence, static_cast<uint32_t>(item.size()));
      inner = sequence + item;
    }
    data += inner;
  } else {
    for (int level = 0; level < depth; ++level) {
      append_u16_le(data, 0x0040);
      append_u16_le(data, 0xA730);
      data += std::string("SQ\0\0", 4);
      append_u32_le(data, 0xFFFFFFFF);
      append_u16_le(data, 0xFFFE);
      append_u16_le(data, 0xE000);
      append_u32_le(data, 0xFFFFFFFF);
    }
    for (int level = 0; level < depth; ++level) {
      for (uint16_t delimiter : {uint16_t{0xE00D}, uint16_t{0xE0DD}}) {
        append_u16_le(data, 0xFFFE);
        append_u16_le(data, delimiter);
        append_u32_le(data, 0);
      }
    }
  }
  element(data, 0x0028, 0x0002, "US", us(1));
  element(data, 0x0028, 0x0004, "CS", "MONOCHROME2");
  element(data, 0x0028, 0x0010, "US", us(16));
  element(data, 0x0028, 0x0011, "US", us(16));
  element(data, 0x0028, 0x0100, "US", us(8));
  element(data, 0x0028, 0x0101, "US", us(8));
  element(data, 0x0028, 0x0102, "US", us(7));
  element(data, 0x0028, 0x0103, "US", us(0));
  append_u16_le(data, 0x7FE0);
  append_u16_le(data, 0x0010);
  if (implicit_vr) {
    append_u32_le(data, 256);
  } else {
    data += std::string("OW\0\0", 4);
    append_u32_le(data, 256);
  }
  data += std::string(256, '\x80');
  return file + data;
}

// DCMTK parses nested sequences by recursion: 20,000 levels (720 KB) overflowed an 8 MB stack and killed the process
// (`serve` answering a POST with it included) before this was refused up front.
TEST(HostileNesting, DicomSequencesNested20000DeepAreRefusedBeforeParsing) {
  for (bool implicit_vr : {false, true}) {
    SCOPED_TRACE(implicit_vr ? "implicit VR, defined lengths" : "explicit VR, undefined lengths");
    const std::string deep = nested_dicom(20000, implicit_vr);
    expect_error([&] { decode(deep, "deep.dcm"); },
                 {"deep.dcm: sequences nest more than 64 deep", "(0040,A730)", "refused before parsing"});
    // A real file's few levels read as ever.
    const DecodedImage shallow = decode(nested_dicom(8, implicit_vr), "shallow.dcm");
    EXPECT_EQ(shallow.width, 16);
    EXPECT_EQ(shallow.height, 16);
    EXPECT_EQ(decode(nested_dicom(64, implicit_vr), "limit.dcm").width, 16);
    expect_error([&] { decode(nested_dicom(65, implicit_vr), "over.dcm"); }, {"over.dcm: sequences nest more than 64"});
  }
}

TEST(HostileSizes, ImagePixelLimitIsRaisedAndLoweredByTheEnvironment) {
  const std::string png = small_png();
  EXPECT_EQ(decode(png, "small.png").width, 16);
  {
    ScopedEnvironment lower("VITPIPE_MAX_IMAGE_PIXELS", "255");
    expect_error([&] { decode(png, "small.png"); }, {"16x16 = 256 pixels, more than the limit of 255"});
  }
  {
    ScopedEnvironment exact("VITPIPE_MAX_IMAGE_PIXELS", "256");
    EXPECT_EQ(decode(png, "small.png").height, 16);
  }
  ScopedEnvironment bad("VITPIPE_MAX_IMAGE_PIXELS", "lots");
  expect_error([&] { decode(png, "small.png"); },
               {"VITPIPE_MAX_IMAGE_PIXELS: expected a positive integer, got 'lots'"});
}

// A gzip file whose second line is `line_bytes` long: concatenated gzip members of 1 MiB of 'a' each (gzip readers
// read members one after another), so 1 GB of text takes 1 MB on disk and no time to write.
void write_gzip_with_long_line(const fs::path& path, const std::string& first_line, int64_t line_bytes) {
  auto member = [](const std::string& text) {
    z_stream stream{};
    deflateInit2(&stream, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY);  // +16: a gzip wrapper
    std::string out(deflateBound(&stream, static_cast<uLong>(text.size())) + 64, '\0');
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    stream.avail_in = static_cast<uInt>(text.size());
    stream.next_out = reinterpret_cast<Bytef*>(out.data());
    stream.avail_out = static_cast<uInt>(out.size());
    EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
    out.resize(stream.total_out);
    deflateEnd(&stream);
    return out;
  };
  std::string file = member(first_line);
  const std::string chunk = member(std::string(1 << 20, 'a'));
  for (int64_t i = 0; i < line_bytes / (1 << 20); ++i) file += chunk;
  file += member("\n");
  write_file(path, file);
}

TEST(HostileSizes, CsvRecordOfOneGigabyteIsRefusedAfterTheLimit) {
  TempDir dir;
  const fs::path path = dir / "labels.csv.gz";
  write_gzip_with_long_line(path, "path,label\n", int64_t{1} << 30);
  EXPECT_LT(fs::file_size(path), 4u << 20);
  expect_error([&] { read_csv(path); }, {path.string() + " line 2: a record longer than the limit of 1048576 bytes",
                                         "set VITPIPE_MAX_CSV_LINE_BYTES to raise the limit"});
  const fs::path list = dir / "test_list.txt.gz";
  write_gzip_with_long_line(list, "00000001_000.png\n", int64_t{1} << 30);
  expect_error([&] { read_line_list(list); }, {list.string() + " line 2: a line longer than the limit of 1048576 bytes",
                                               "VITPIPE_MAX_CSV_LINE_BYTES"});
}

TEST(HostileSizes, CsvRecordLimitIsRaisedByTheEnvironment) {
  TempDir dir;
  const fs::path path = dir / "labels.csv";
  write_file(path, "path,label\n" + std::string(2000, 'x') + ",Mass\nb.png,Effusion\n");
  {
    ScopedEnvironment lower("VITPIPE_MAX_CSV_LINE_BYTES", "1000");
    expect_error([&] { read_csv(path); }, {path.string() + " line 2: a record longer than the limit of 1000 bytes"});
  }
  ScopedEnvironment raised("VITPIPE_MAX_CSV_LINE_BYTES", "4000");
  const CsvTable table = read_csv(path);
  ASSERT_EQ(table.rows.size(), 2u);
  EXPECT_EQ(table.rows[0][0].size(), 2000u);
  EXPECT_EQ(table.row_lines[1], 3);
}

// The streaming parser against the whole-text one, at every chunk boundary: quotes, CRLF and the byte order mark
// split anywhere must parse the same.
TEST(HostileSizes, CsvParsesTheSameWhateverTheChunkBoundaries) {
  TempDir dir;
  const std::string text = "\xEF\xBB\xBFpath,\"label\"\r\n\"a,\"\"b\"\"\",\"x\ny\"\r\n  \"c\"  ,d\r\n\r\ne,f";
  const CsvTable whole = parse_csv(text, "t.csv");
  ASSERT_EQ(whole.header, (std::vector<std::string>{"path", "label"}));
  ASSERT_EQ(whole.rows.size(), 3u);
  EXPECT_EQ(whole.rows[0][0], "a,\"b\"");
  EXPECT_EQ(whole.rows[0][1], "x\ny");
  EXPECT_EQ(whole.rows[1][0], "c");
  EXPECT_EQ(whole.row_lines, (std::vector<int64_t>{2, 4, 6}));
  // read_csv reads in 64 KiB chunks: a first record of the right length puts a boundary anywhere in the rest.
  const std::string body = text.substr(3);  // without the byte order mark
  for (size_t offset = 0; offset < body.size(); ++offset) {
    // 17 bytes of byte order mark, header and ",q\n" around the filler: the boundary falls `offset` bytes in.
    const std::string filler = "\xEF\xBB\xBFpath,label\n" + std::string(65536 - 17 - offset, 'z') + ",q\n";
    const fs::path path = dir / "chunks.csv";
    write_file(path, filler + body.substr(body.find('\n') + 1));
    const CsvTable chunked = read_csv(path);
    ASSERT_EQ(chunked.rows.size(), 4u) << "offset " << offset;
    for (size_t r = 0; r < 3; ++r) EXPECT_EQ(chunked.rows[r + 1], whole.rows[r]) << "offset " << offset;
  }
}

}  // namespace
}  // namespace vitpipe
