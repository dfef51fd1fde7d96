// A packed cache whose pixels.u8 is edited in place after `prepare` (same size, so the size check at opening cannot
// see it): each record's CRC-32 makes the edited images unreadable, an error naming them, or skipped and counted by
// a loader with skip_unreadable; the others still load.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "data/data_spec.h"
#include "data/file_dataset.h"
#include "data/loader.h"
#include "data/packed_cache.h"
#include "test_helpers.h"
#include "util/atomic_file.h"

namespace vitpipe {
namespace {

using testing::expect_error;
using testing::sample_dir;
using testing::TempDir;

TEST(PackedCacheTampering, RecordsEditedAfterPrepareAreUnreadableImages) {
  TempDir dir;
  PrepareCacheOptions prepare;
  prepare.image_size = 8;
  prepare.threads = 1;
  prepare.progress = false;
  prepare_packed_cache(*open_chestxray14_dataset(sample_dir(), DatasetOptions{}), dir / "cache", prepare);
  const nlohmann::json index = nlohmann::json::parse(read_text_file(dir / "cache" / "index.json"));
  ASSERT_EQ(index.at("crc32").size(), index.at("names").size());

  // Flip one byte in the records of the first two images.
  const std::string first = index.at("names")[0], second = index.at("names")[1];
  {
    std::fstream pixels(dir / "cache" / "pixels.u8", std::ios::in | std::ios::out | std::ios::binary);
    for (int k = 0; k < 2; ++k) {
      const auto at = static_cast<std::streamoff>(index.at("offsets")[k].get<uint64_t>() + 3);
      pixels.seekg(at);
      const char byte = static_cast<char>(pixels.get() ^ 0x5A);
      pixels.seekp(at);
      pixels.put(byte);
    }
  }
  const auto cache = open_dataset("cache:" + (dir / "cache").string(), DatasetOptions{});
  int64_t first_item = -1, second_item = -1;
  for (int64_t i = 0; i < cache->size(); ++i) {
    if (cache->name(i) == first) first_item = i;
    if (cache->name(i) == second) second_item = i;
  }
  ASSERT_GE(first_item, 0);
  StoredImage view;
  expect_error([&] { cache->stored(first_item, &view); },
               {"the pixels of " + first, "do not match the checksum recorded by `vitpipe data prepare`",
                "modified after it was prepared", "vitpipe data prepare --data"});
  ASSERT_GE(second_item, 0);
  expect_error([&] { cache->stored(second_item, &view); }, {"the pixels of " + second});
  for (int64_t i = 0; i < 3; ++i)
    if (i != first_item && i != second_item) {
      EXPECT_TRUE(cache->stored(i, &view)) << cache->name(i);
    }

  // A loader over every item: without skip_unreadable the first edited record stops it naming the image; with it,
  // both are left out and counted.
  PreprocessorConfig config;
  config.height = config.width = 8;
  std::vector<int64_t> items(static_cast<size_t>(cache->size()));
  for (size_t i = 0; i < items.size(); ++i) items[i] = static_cast<int64_t>(i);
  LoaderOptions options = evaluation_loader_options(64);
  options.threads = 2;
  {
    Loader loader(cache, items, config, options);
    loader.start_epoch(0);
    Batch batch;
    expect_error(
        [&] {
          while (loader.next(&batch)) {
          }
        },
        {"do not match the checksum", "pass --skip-unreadable"});
  }
  options.skip_unreadable = true;
  Loader loader(cache, items, config, options);
  loader.start_epoch(0);
  Batch batch;
  int64_t rows = 0;
  while (loader.next(&batch)) rows += batch.size();
  EXPECT_EQ(loader.skipped_unreadable(), 2);
  EXPECT_EQ(rows, cache->size() - 2);
}

}  // namespace
}  // namespace vitpipe
