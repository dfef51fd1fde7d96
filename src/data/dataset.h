// Datasets: a list of labelled images with their split (train/val/test) and patient. Every kind (ChestX-ray14,
// CSV, class folders, packed cache) is opened by open_dataset() (data_spec.h) and looks the same to the loader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "data/image.h"
#include "data/image_read_options.h"

namespace vitpipe {

enum class Split : uint8_t { train = 0, val = 1, test = 2, none = 3 };  // none: in no split list
const char* split_name(Split split);                                    // "train", "val", "test", "none"
Split parse_split(std::string_view name, const std::string& where);     // accepts "validation", "valid" too

// The split as the source gives it, before the train_val pool is divided by patient.
enum class SourceSplit : uint8_t { train_val = 0, train = 1, val = 2, test = 3, none = 4 };

// Label conventions of the chest X-ray datasets (CheXpert, MIMIC-CXR: 1 / 0 / -1 uncertain / blank = not
// mentioned). An ignored label is masked per element: out of the loss and out of that label's metrics.
enum class UncertainPolicy { ones, zeros, ignore };  // --uncertain: U-Ones, U-Zeros, U-Ignore (Irvin et al. 2019)
enum class BlankPolicy { zeros, ignore };            // --blank: a label not mentioned is negative, or unknown
enum class LabelVote { any, majority };              // --label-vote: several readers per image (VinDr-CXR)

struct DatasetOptions {
  double val_fraction = 0.1;     // share of the train_val images (whole patients) that become `val`
  uint64_t seed = 0;             // seeds the patient division
  bool add_no_finding = false;   // multi-label: a last label "No Finding" = 1 when an image has no finding
  std::string view;              // "" = all views; PA, AP, ... (exact, any case), or frontal / lateral
  bool skip_unreadable = false;  // missing or undecodable images: warn, skip and count instead of failing
  bool allow_missing = false;    // inspection only: count files listed but absent instead of failing
  ImageReadOptions image_read;   // how image files become 8-bit pixels (16-bit PNG, DICOM)
  UncertainPolicy uncertain = UncertainPolicy::ignore;
  BlankPolicy blank = BlankPolicy::zeros;
  LabelVote label_vote = LabelVote::any;
  std::string mimic_labels = "chexpert";  // MIMIC-CXR-JPG's label file: chexpert or negbio
  std::string labels;                     // --labels chestxray14|chexpert|union|FILE; "" = the dataset's own
  // csv: columns kept per image for subgroup evaluation (eval --subgroup), not read as labels.
  std::vector<std::string> subgroup_columns;
};

const char* uncertain_policy_name(UncertainPolicy policy);  // "ones", "zeros", "ignore"
const char* blank_policy_name(BlankPolicy policy);          // "zeros", "ignore"
const char* label_vote_name(LabelVote vote);                // "any", "majority"
// True when `view` passes the --view filter `wanted`: the same name (any case), or wanted = frontal and a view
// starting with PA or AP, or wanted = lateral and one of LATERAL, LL, RL, L.
bool view_matches(const std::string& wanted, const std::string& view);

struct DatasetItem {
  std::string name;             // as listed: an image name, or a path relative to the CSV / folder root
  std::vector<int32_t> labels;  // indices into Dataset::label_names(), ascending (single-label: exactly one)
  Split split = Split::none;
  std::string patient;    // "" when the source has no patient ids (then each image is its own patient)
  std::string view;       // View Position ("PA", "AP", "LATERAL", ...) or ""
  std::string sex;        // as the source codes it ("M" / "F" for NIH), or "" when not known
  double age_years = -1;  // -1 when not known; NIH's impossible ages (> 120) are kept, subgroups exclude them
  // The csv: columns named by --subgroup (DatasetOptions::subgroup_columns), in that order: this image's values.
  std::vector<std::string> subgroup_values;
  // As the source codes them, ascending; --uncertain and --blank decide what they mean (apply_dataset_options).
  std::vector<int32_t> uncertain;    // coded -1
  std::vector<int32_t> unmentioned;  // left blank / NaN
  std::vector<int32_t> masked;       // unknown after the policies: out of the loss and of that label's AUC
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
  // num_labels() floats: 1 where item i's label is known, 0 where it is masked.
  void write_label_weights(int64_t i, float* row) const;
  bool has_masked_labels() const;  // any item with a masked label

  // How this dataset's image files become 8-bit pixels (a cache: how it was prepared).
  const ImageReadOptions& image_read_options() const { return image_read_; }

  // Replaces the label set by `names`: new label k takes old label source[k] (-1: unknown for every item, masked).
  // Old labels not taken are dropped. Multi-label datasets only.
  void remap_labels(const std::vector<std::string>& names, const std::vector<int32_t>& source);

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
  ImageReadOptions image_read_;
};

// What a source lists, before options are applied: shared by every dataset kind (and stored in the cache) so the
// patient division is computed by one function wherever the pixels come from.
struct SourceEntry {
  DatasetItem item;  // split not yet set
  SourceSplit source_split = SourceSplit::none;
};

// Divides the train_val entries into train/val by patient, sets each item's split, resolves uncertain and blank
// labels into positives and masks (--uncertain, --blank), applies the view filter and adds "No Finding" when asked
// (appending it to `label_names`; masked where an item has no positive but a masked label). Returns the positions
// in `entries` that are kept. `no_finding_allowed`: the source is multi-label with an empty label set meaning
// "No Finding".
std::vector<size_t> apply_dataset_options(std::vector<SourceEntry>& entries, std::vector<std::string>& label_names,
                                          bool no_finding_allowed, const DatasetOptions& options,
                                          const std::string& source_for_errors);

// Validation patients: the distinct patient keys (item name when there is no patient id), sorted, shuffled with
// Rng({seed, stream}), taken into val while val holds fewer than round(val_fraction * n) images. Returns a 0/1 flag
// per key position. Whole patients, so no patient is in both train and val.
std::vector<uint8_t> choose_validation_items(const std::vector<std::string>& patient_keys, double val_fraction,
                                             uint64_t seed);

}  // namespace vitpipe
