// Datasets: a list of labelled images with their split (train/val/test) and patient. Every kind (ChestX-ray14,
// CSV, class folders, packed cache) is opened by open_dataset() (data_spec.h) and looks the same to the loader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "data/image.h"

namespace vitpipe {

enum class Split : uint8_t { train = 0, val = 1, test = 2, none = 3 };  // none: in no split list
const char* split_name(Split split);                                    // "train", "val", "test", "none"
Split parse_split(std::string_view name, const std::string& where);     // accepts "validation", "valid" too

// The split as the source gives it, before the train_val pool is divided by patient.
enum class SourceSplit : uint8_t { train_val = 0, train = 1, val = 2, test = 3, none = 4 };

struct DatasetOptions {
  double val_fraction = 0.1;     // share of the train_val images (whole patients) that become `val`
  uint64_t seed = 0;             // seeds the patient division
  bool add_no_finding = false;   // multi-label: a last label "No Finding" = 1 when an image has no finding
  std::string view;              // "" = all views, else keep only this View Position ("PA" / "AP")
  bool skip_unreadable = false;  // missing or undecodable images: warn, skip and count instead of failing
  bool allow_missing = false;    // inspection only: count files listed but absent instead of failing
};

struct DatasetItem {
  std::string name;             // as listed: an image name, or a path relative to the CSV / folder root
  std::vector<int32_t> labels;  // indices into Dataset::label_names(), ascending (single-label: exactly one)
  Split split = Split::none;
  std::string patient;  // "" when the source has no patient ids (then each image is its own patient)
  std::string view;     // View Position ("PA", "AP") or ""
};

// Pixels a dataset already holds at training resolution (the packed cache): read in place, no decoding.
struct StoredImage {
  const uint8_t* pixels = nullptr;  // height * width * channels, row-major, interleaved
  int64_t width = 0;
  int64_t height = 0;
  int channels = 0;     // 1 (gray: R = G = B) or 3
  bool padded = false;  // at least 64 readable bytes follow the last pixel (lets vector code over-read)
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  const std::string& spec() const { return spec_; }  // "chestxray14:/abs/root", ...
  const std::string& kind() const { return kind_; }  // "chestxray14", "csv", "folder", "cache"
  const std::vector<std::string>& label_names() const { return label_names_; }
  int64_t num_labels() const { return static_cast<int64_t>(label_names_.size()); }
  bool multi_label() const { return multi_label_; }

  int64_t size() const { return static_cast<int64_t>(items_.size()); }
  const DatasetItem& item(int64_t i) const { return items_[static_cast<size_t>(i)]; }
  const std::string& name(int64_t i) const { return item(i).name; }
  std::vector<int64_t> split_indices(Split split) const;  // ascending item indices

  void write_labels(int64_t i, float* row) const;  // num_labels() floats: multi-hot (single-label: one-hot)
  int64_t class_index(int64_t i) const;            // single-label: the class; multi-label: -1

  // Items listed by the source but absent on disk (only with allow_missing or skip_unreadable).
  const std::vector<std::string>& missing() const { return missing_; }

  // The decoded image (Pillow's convert("RGB") pixels). Throws naming the file when unreadable.
  RgbImage load(int64_t i) const { return to_rgb(load_decoded(i)); }
  // The same, but a gray image stays one channel (R = G = B): a third of the work downstream.
  virtual DecodedImage load_decoded(int64_t i) const = 0;
  // Image file of item i (empty for the cache).
  virtual std::filesystem::path file_path(int64_t) const { return {}; }
  // The cache: item i's pixels at stored_image_size() (resized with stored_resample()); false otherwise.
  virtual bool stored(int64_t, StoredImage*) const { return false; }
  virtual int64_t stored_image_size() const { return 0; }
  virtual int stored_resample() const { return -1; }
  // The cache: how its pixels were made (PreprocessorConfig::geometry()); "" otherwise.
  virtual std::string stored_geometry() const { return ""; }

 protected:
  std::string spec_;
  std::string kind_;
  std::vector<std::string> label_names_;
  bool multi_label_ = true;
  std::vector<DatasetItem> items_;
  std::vector<std::string> missing_;
};

// What a source lists, before options are applied: shared by every dataset kind (and stored in the cache) so the
// patient division is computed by one function wherever the pixels come from.
struct SourceEntry {
  DatasetItem item;  // split not yet set
  SourceSplit source_split = SourceSplit::none;
};

// Divides the train_val entries into train/val by patient, sets each item's split, applies the view filter and
// adds "No Finding" when asked (appending it to `label_names`). Returns the positions in `entries` that are kept.
// `no_finding_allowed`: the source is multi-label with an empty label set meaning "No Finding".
std::vector<size_t> apply_dataset_options(std::vector<SourceEntry>& entries, std::vector<std::string>& label_names,
                                          bool no_finding_allowed, const DatasetOptions& options,
                                          const std::string& source_for_errors);

// Validation patients: the distinct patient keys (item name when there is no patient id), sorted, shuffled with
// Rng({seed, stream}), taken into val while val holds fewer than round(val_fraction * n) images. Returns a 0/1 flag
// per key position. Whole patients, so no patient is in both train and val.
std::vector<uint8_t> choose_validation_items(const std::vector<std::string>& patient_keys, double val_fraction,
                                             uint64_t seed);

}  // namespace vitpipe
