// Bit-exact comparisons with Pillow and numpy: tests/image/make_references.py writes inputs and reference outputs
// into a temporary folder, these tests decode / resize / preprocess them with vitpipe and compare every byte.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/image_processor.h"
#include "data/pillow_resize.h"
#include "util/error.h"

#ifndef VITPIPE_PYTHON_EXECUTABLE
#define VITPIPE_PYTHON_EXECUTABLE "/usr/bin/python3"
#endif

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "vitpipe_image_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string python() {
  const char* env = std::getenv("VITPIPE_PYTHON");
  return env != nullptr && *env != '\0' ? env : VITPIPE_PYTHON_EXECUTABLE;
}

// Runs make_references.py `what` into `dir`; false (with a test failure) when Python or Pillow is missing.
bool generate(const std::string& what, const fs::path& dir) {
  const fs::path script = fs::path(VITPIPE_SOURCE_DIR) / "tests" / "image" / "make_references.py";
  std::ostringstream quoted;
  quoted << '\'' << python() << "' '" << script.string() << "' " << what << " '" << dir.string() << '\'';
  const std::string command = quoted.str();
  const int status = std::system(command.c_str());
  if (status != 0) {
    ADD_FAILURE() << "reference generation failed (" << status << "): " << command;
    return false;
  }
  return true;
}

std::vector<std::vector<std::string>> read_manifest(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> fields;
    std::stringstream stream(line);
    std::string field;
    while (std::getline(stream, field, '\t')) fields.push_back(field);
    rows.push_back(fields);
  }
  return rows;
}

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// "" when equal, else where the first difference is and how many bytes differ.
std::string compare_pixels(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, int64_t width,
                           int channels) {
  if (got.size() != want.size()) {
    return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  }
  size_t differing = 0;
  size_t first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && differing++ == 0) first = i;
  }
  if (differing == 0) return "";
  const int64_t pixel = static_cast<int64_t>(first) / channels;
  std::ostringstream out;
  out << differing << " of " << got.size() << " bytes differ; first at x=" << pixel % width << " y=" << pixel / width
      << " c=" << first % channels << ": got " << int(got[first]) << ", want " << int(want[first]);
  return out.str();
}

TEST(PillowReference, DecodeMatchesPillowConvertRgb) {
  TempDir dir;
  if (!generate("decode", dir.path())) return;
  const auto cases = read_manifest(dir.path() / "decode.txt");
  ASSERT_GT(cases.size(), 100u);
  int checked_ok = 0, checked_errors = 0;
  // Pillow's own pixels are --intensity pillow (the default scales 16-bit gray over its range instead).
  ImageReadOptions pillow;
  pillow.intensity.kind = IntensityKind::pillow;
  for (const auto& c : cases) {
    const fs::path file = dir.path() / c.at(1);
    if (c.at(0) == "ok") {
      SCOPED_TRACE(c.at(1));
      RgbImage image;
      try {
        image = decode_image_file(file, pillow);
      } catch (const std::exception& e) {
        ADD_FAILURE() << c.at(1) << ": " << e.what();
        continue;
      }
      EXPECT_EQ(image.width, std::stoll(c.at(2)));
      EXPECT_EQ(image.height, std::stoll(c.at(3)));
      const std::string diff = compare_pixels(image.pixels, read_bytes(dir.path() / c.at(4)), image.width, 3);
      EXPECT_EQ(diff, "") << c.at(1);
      // The keep-gray path expands to the same bytes, and from memory gives the same as from a file.
      const std::vector<uint8_t> bytes = read_bytes(file);
      const DecodedImage compact = decode_image_memory_keep_gray(bytes.data(), bytes.size(), c.at(1), pillow);
      EXPECT_EQ(to_rgb(compact).pixels, image.pixels) << c.at(1);
      ++checked_ok;
    } else {
      const std::string& expected = c.at(2);
      try {
        decode_image_file(file);
        ADD_FAILURE() << c.at(1) << ": decoded, expected an error containing '" << expected << "'";
      } catch (const Error& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find(expected), std::string::npos) << c.at(1) << ": " << message;
        EXPECT_NE(message.find(c.at(1)), std::string::npos) << "error does not name the file: " << message;
      }
      ++checked_errors;
    }
  }
  EXPECT_GT(checked_ok, 90);
  EXPECT_GT(checked_errors, 15);
}

TEST(PillowReference, ResizeMatchesPillow) {
  TempDir dir;
  if (!generate("resize", dir.path())) return;
  const auto cases = read_manifest(dir.path() / "resize.txt");
  ASSERT_GT(cases.size(), 300u);
  for (const auto& c : cases) {
    const int64_t in_w = std::stoll(c.at(1)), in_h = std::stoll(c.at(2));
    const int channels = std::stoi(c.at(3));
    const int64_t out_w = std::stoll(c.at(4)), out_h = std::stoll(c.at(5));
    const ResampleFilter filter = resample_filter_from_pil(std::stoi(c.at(6)));
    const std::vector<uint8_t> in = read_bytes(dir.path() / c.at(0));
    ASSERT_EQ(in.size(), static_cast<size_t>(in_w * in_h * channels)) << c.at(0);
    std::vector<uint8_t> out(static_cast<size_t>(out_w * out_h * channels));
    resize_like_pillow(in.data(), in_w, in_h, channels, out.data(), out_w, out_h, filter);
    const std::string diff = compare_pixels(out, read_bytes(dir.path() / c.at(7)), out_w, channels);
    EXPECT_EQ(diff, "") << in_w << "x" << in_h << "x" << channels << " -> " << out_w << "x" << out_h << " "
                        << resample_filter_name(filter) << " (" << c.at(0) << ")";
  }
}

TEST(PillowReference, PreprocessMatchesViTImageProcessor) {
  TempDir dir;
  if (!generate("preprocess", dir.path())) return;
  const auto cases = read_manifest(dir.path() / "preprocess.txt");
  ASSERT_GT(cases.size(), 40u);
  for (const auto& c : cases) {
    PreprocessorConfig config;
    config.do_resize = c.at(1) == "1";
    config.height = std::stoll(c.at(2));
    config.width = std::stoll(c.at(3));
    config.resample = std::stoi(c.at(4));
    config.do_rescale = c.at(5) == "1";
    config.rescale_factor = std::strtod(c.at(6).c_str(), nullptr);
    config.do_normalize = c.at(7) == "1";
    for (int i = 0; i < 3; ++i) {
      config.image_mean[i] = std::strtod(c.at(8 + i).c_str(), nullptr);
      config.image_std[i] = std::strtod(c.at(11 + i).c_str(), nullptr);
    }
    const std::vector<uint8_t> expected = read_bytes(dir.path() / c.at(14));
    const ImageProcessor processor(config);
    const DecodedImage image = decode_image_file_keep_gray(c.at(0));
    const int64_t h = processor.output_height(image.width, image.height);
    const int64_t w = processor.output_width(image.width, image.height);
    ASSERT_EQ(expected.size(), static_cast<size_t>(3 * h * w * 4)) << c.at(0);
    std::vector<float> out(static_cast<size_t>(3 * h * w));
    processor.process(image, out.data());  // gray stays gray until the table lookup
    std::vector<float> out_rgb(out.size());
    processor.process(to_rgb(image), out_rgb.data());  // the RGB path
    size_t differing = 0, differing_rgb = 0, first = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      float want;
      std::memcpy(&want, expected.data() + 4 * i, 4);
      if (std::memcmp(&out[i], &want, 4) != 0 && differing++ == 0) first = i;
      if (std::memcmp(&out_rgb[i], &want, 4) != 0) ++differing_rgb;
    }
    std::string what = fs::path(c.at(0)).filename().string() + " resize=" + c.at(1) + " " + c.at(2) + "x" + c.at(3) +
                       " f" + c.at(4) + " rescale=" + c.at(5) + " normalize=" + c.at(7) + " mean0=" + c.at(8);
    EXPECT_EQ(differing, 0u) << what << ": first difference at " << first;
    EXPECT_EQ(differing_rgb, 0u) << what << " (RGB path)";
  }
}

}  // namespace
}  // namespace vitpipe
