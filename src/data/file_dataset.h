// Datasets whose images are files on disk: ChestX-ray14 (NIH CSV + official split lists), a CSV of paths and
// labels, or one folder per class. Each opener lists the source, checks every image file exists, and hands the
// entries to apply_dataset_options().
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace vitpipe {

class FileDataset : public Dataset {
 public:
  struct Source {
    std::string spec, kind;
    std::vector<std::string> label_names;  // before --add-no-finding
    bool multi_label = true;
    bool no_finding_allowed = false;
    std::vector<SourceEntry> entries;          // images found on disk
    std::vector<std::filesystem::path> paths;  // one per entry (empty: inside one of `archives`)
    // Image archives (NIH's images_0XX.tar.gz) holding the entries whose path is empty, read only by `data prepare`
    // (data/archive_staging.h): which archive holds which image is known once they have been read.
    std::vector<std::filesystem::path> archives;
    std::vector<SourceEntry> missing;                   // listed but absent
    std::vector<std::filesystem::path> metadata_files;  // CSV, split lists: part of a cache's fingerprint
    // Options that shaped the listing itself (VinDr-CXR's --label-vote, MIMIC-CXR's --mimic-labels): a cache
    // records them, and refuses to be opened with others.
    std::map<std::string, std::string> listing_options;

    // Lists `entry` as found at `path` when that is a regular file, as missing otherwise.
    void add(SourceEntry entry, const std::filesystem::path& path);
  };
  FileDataset(Source source, const DatasetOptions& options);

  DecodedImage load_decoded(int64_t i) const override;
  std::filesystem::path file_path(int64_t i) const override { return paths_[static_cast<size_t>(i)]; }

  // The source as listed, before options: what `data prepare` stores so a cache can redo the same division.
  const Source& source() const { return source_; }
  // Position in source().entries of item i.
  size_t source_position(int64_t i) const { return kept_[static_cast<size_t>(i)]; }

 private:
  Source source_;
  std::vector<size_t> kept_;
  std::vector<std::filesystem::path> paths_;
};

std::shared_ptr<FileDataset> open_chestxray14_dataset(const std::filesystem::path& root, const DatasetOptions& options);
std::shared_ptr<FileDataset> open_csv_dataset(const std::filesystem::path& csv, const DatasetOptions& options);
std::shared_ptr<FileDataset> open_folder_dataset(const std::filesystem::path& root, const DatasetOptions& options);
std::shared_ptr<FileDataset> open_chexpert_dataset(const std::filesystem::path& root, const DatasetOptions& options);
std::shared_ptr<FileDataset> open_mimic_cxr_dataset(const std::filesystem::path& root, const DatasetOptions& options);
std::shared_ptr<FileDataset> open_padchest_dataset(const std::filesystem::path& root, const DatasetOptions& options);
std::shared_ptr<FileDataset> open_vindr_cxr_dataset(const std::filesystem::path& root, const DatasetOptions& options);

// True for .png / .jpg / .jpeg / .dcm / .dicom (any case).
bool is_image_file_name(const std::filesystem::path& path);
// An image file by name, or by its first bytes (PNG, JPEG or DICOM signature): a DICOM file is often named by its UID
// alone, dots included.
bool is_image_file(const std::filesystem::path& path);

}  // namespace vitpipe
