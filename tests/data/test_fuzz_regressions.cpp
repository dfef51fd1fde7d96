// Inputs the fuzz harnesses (tools/fuzz) found that escaped as something other than a vitpipe::Error naming the
// file: each is now refused (or read) like any other bad input.
#include <gtest/gtest.h>

#include "data/file_dataset.h"
#include "data/packed_cache.h"
#include "test_helpers.h"

namespace vitpipe {
namespace {

using testing::expect_error;
using testing::TempDir;
using testing::write_file;

// fuzz_csv: an image name longer than the file system allows threw std::filesystem_error ("File name too long")
// out of open_csv_dataset. It is an image that is not there.
TEST(FuzzRegressions, CsvImageNameTooLongForTheFileSystemIsAMissingImage) {
  TempDir dir;
  write_file(dir / "a.png", "");
  write_file(dir / "data.csv", "path,label\na.png,Mass\n" + std::string(5000, 'x') + ".png,Effusion\n");
  DatasetOptions options;
  options.allow_missing = true;
  const auto dataset = open_csv_dataset(dir / "data.csv", options);
  EXPECT_EQ(dataset->size(), 1);
  EXPECT_EQ(dataset->missing().size(), 1u);
  expect_error([&] { open_csv_dataset(dir / "data.csv", DatasetOptions{}); }, {"missing"});
}

// fuzz_packed_cache: manifest.json with "format" (or another field read by json::value) of the wrong type threw
// nlohmann's type_error past every check.
TEST(FuzzRegressions, PackedCacheManifestFieldOfTheWrongTypeIsRefused) {
  TempDir dir;
  write_file(dir / "cache" / "manifest.json", R"({"format": ["a.png", "b.png"], "version": 2})");
  expect_error([&] { open_packed_cache(dir / "cache", DatasetOptions{}); },
               {"manifest.json", "malformed", "type must be string, but is array"});
  write_file(dir / "cache" / "manifest.json", R"({"format": "vitpipe-packed-cache", "version": "2"})");
  expect_error([&] { open_packed_cache(dir / "cache", DatasetOptions{}); }, {"manifest.json"});
}

// fuzz_packed_cache: a manifest number that is not an integer of the field's range (5e120 as "image_size", 3.5 or
// 2^40 as "version") went through nlohmann's unchecked get<int64_t>() (undefined behaviour for the float).
TEST(FuzzRegressions, PackedCacheManifestNumbersOutsideTheirRangeAreRefused) {
  TempDir dir;
  const std::string head = R"({"format": "vitpipe-packed-cache", )";
  write_file(dir / "cache" / "manifest.json", head + R"("version": 3.5})");
  expect_error([&] { open_packed_cache(dir / "cache", DatasetOptions{}); },
               {"manifest.json", "\"version\"", "must be an integer, got number"});
  write_file(dir / "cache" / "manifest.json", head + R"("version": 1099511627776})");
  expect_error([&] { open_packed_cache(dir / "cache", DatasetOptions{}); },
               {"manifest.json", "\"version\"", "must lie in [-2147483648, 2147483647], got 1099511627776"});
  const std::string v =
      head + "\"version\": " + std::to_string(kPackedCacheFormatVersion) + ", \"source\": \"csv:x.csv\", ";
  write_file(dir / "cache" / "manifest.json", v + R"("image_size": 5e120, "resample": 2})");
  expect_error([&] { open_packed_cache(dir / "cache", DatasetOptions{}); },
               {"manifest.json", "\"image_size\"", "must be an integer"});
  write_file(dir / "cache" / "manifest.json", v + R"("image_size": 4000000000, "resample": 2})");
  expect_error([&] { open_packed_cache(dir / "cache", DatasetOptions{}); },
               {"manifest.json", "\"image_size\"", "VITPIPE_MAX_IMAGE_PIXELS", "got 4000000000"});
}

}  // namespace
}  // namespace vitpipe
