// The packed cache (`vitpipe data prepare`, then --data cache:DIR): every image decoded, resized (Pillow's resize)
// and cropped once as the model's image processor does, to S x S, stored as uint8 in one memory-mapped file, so
// training reads pixels at memory speed.
//
//   DIR/pixels.u8      records back to back: S*S bytes for a gray image (R = G = B), S*S*3 for a colour one
//   DIR/index.json     per image: name, labels (positive, uncertain, unmentioned), source split, patient, view, sex,
//                      age in years (-1 unknown; subgroups need them when the source is gone), byte
//                      offset, channels, CRC-32 of its pixels (checked on every read: a record edited after prepare
//                      is an unreadable image)
//   DIR/manifest.json  format version, settings (image size, resample, the processor's resize and crop, how images
//                      were read: intensity policy and DICOM window), the source spec, its listing options and its
//                      fingerprint, sizes and sha256 of the two other files. Written last: without it there is no
//                      cache.
// The labels are stored as the source codes them, so --uncertain, --blank and --labels can change when the cache is
// opened; the reading of the pixels cannot (a model that reads images otherwise refuses the cache).
//
// Opening checks the format version, the sizes and index digest, and (when the source is still there) that the
// source's label files and image files are unchanged; a stale cache is refused with a message saying what changed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/file_dataset.h"
#include "io/preprocessor_config.h"
#include "util/mapped_file.h"

namespace vitpipe {

// 2: image read options, uncertain / blank labels; 3: per-record CRC-32; 4: sex and age per image (subgroups).
inline constexpr int kPackedCacheFormatVersion = 4;
// Version 3 is still read, without sex and age (a warning says so and how to add them).
inline constexpr int kPackedCacheOldestReadVersion = 3;
inline constexpr const char* kPackedCacheManifestName = "manifest.json";

// The files a cache folder holds (what `data prepare` may replace).
std::vector<std::string> packed_cache_files();

struct PrepareCacheOptions {
  int64_t image_size = 224;  // S: images are stored S x S (a plain resize, unless `preprocessor` is given)
  int resample = 2;          // PIL filter id (2 = bilinear, what ViTImageProcessor uses)
  std::optional<PreprocessorConfig> preprocessor;  // a model's processing (resize + crop) instead of the two above
  int threads = 0;                                 // decoding threads; 0 = every core this process may use
  bool skip_unreadable = false;  // leave out (and list) images that fail to decode instead of stopping
  bool progress = true;          // progress bar on stderr
  bool force = false;            // write into a folder holding other files (util/output_folder.h)
};

struct PrepareCacheReport {
  int64_t images = 0;                // stored
  int64_t gray_images = 0;           // of which stored as one channel
  std::vector<std::string> skipped;  // unreadable, left out (with skip_unreadable)
  uint64_t pixel_bytes = 0;
  double seconds = 0;
};

// Decodes every image of `source` (all its entries, whatever split or view), resizes (and crops) it to S x S and
// writes DIR.
// Atomic: files are written to temporaries and renamed, the manifest last; an old manifest is removed first, so an
// interrupted run never leaves a cache that looks valid.
PrepareCacheReport prepare_packed_cache(const FileDataset& source, const std::filesystem::path& dir,
                                        const PrepareCacheOptions& options);

class PackedCacheDataset : public Dataset {
 public:
  DecodedImage load_decoded(int64_t i) const override;
  bool stored(int64_t i, StoredImage* out) const override;
  int64_t stored_image_size() const override { return image_size_; }
  int stored_resample() const override { return resample_; }
  std::string stored_geometry() const override { return geometry_; }

  const std::filesystem::path& directory() const { return dir_; }
  const std::string& source_spec() const { return source_spec_; }

 private:
  friend std::shared_ptr<PackedCacheDataset> open_packed_cache(const std::filesystem::path&, const DatasetOptions&);
  std::filesystem::path dir_;
  std::string source_spec_;
  int64_t image_size_ = 0;
  int resample_ = 2;
  std::string geometry_;
  std::shared_ptr<MappedFile> pixels_;
  std::vector<uint64_t> offsets_;    // per item
  std::vector<uint8_t> channels_;    // per item
  std::vector<uint32_t> checksums_;  // per item: CRC-32 of its pixels
  std::string rerun_;                // "; run `vitpipe data prepare ...` again", for messages
};

std::shared_ptr<PackedCacheDataset> open_packed_cache(const std::filesystem::path& dir, const DatasetOptions& options);

}  // namespace vitpipe
