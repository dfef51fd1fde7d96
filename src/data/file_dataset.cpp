#include "data/file_dataset.h"

#include <algorithm>

#include "util/error.h"
#include "util/log.h"

namespace vitpipe {

void FileDataset::Source::add(SourceEntry entry, const std::filesystem::path& path) {
  std::error_code unreadable;  // a path that cannot be examined (a name too long for the file system) is missing
  if (std::filesystem::is_regular_file(path, unreadable)) {
    entries.push_back(std::move(entry));
    paths.push_back(path);
  } else {
    missing.push_back(std::move(entry));
  }
}

bool is_image_file_name(const std::filesystem::path& path) {
  std::string ext = path.extension().string();
  for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".dcm" || ext == ".dicom";
}

bool is_image_file(const std::filesystem::path& path) {
  // DICOM files are often named by their UID ("1.2.826.0.1.3680043...."): whatever follows a dot, look inside.
  return is_image_file_name(path) || has_image_signature(path);
}

FileDataset::FileDataset(Source source, const DatasetOptions& options) : source_(std::move(source)) {
  spec_ = source_.spec;
  kind_ = source_.kind;
  image_read_ = options.image_read;
  multi_label_ = source_.multi_label;
  label_names_ = source_.label_names;
  std::vector<SourceEntry> entries = source_.entries;
  kept_ = apply_dataset_options(entries, label_names_, source_.no_finding_allowed, options, spec_);
  items_.reserve(kept_.size());
  paths_.reserve(kept_.size());
  for (size_t k : kept_) {
    items_.push_back(std::move(entries[k].item));
    paths_.push_back(source_.paths[k]);
  }
  for (const auto& m : source_.missing)
    if (options.view.empty() || view_matches(options.view, m.item.view)) missing_.push_back(m.item.name);

  if (!missing_.empty() && !options.allow_missing) {
    std::string examples;
    for (size_t i = 0; i < std::min<size_t>(3, missing_.size()); ++i) {
      const auto& m = missing_[i];
      examples += (i ? ", " : "") + m;
    }
    if (!options.skip_unreadable)
      fail(spec_, ": ", missing_.size(), " of ", missing_.size() + items_.size(),
           " listed images are missing on disk (", examples, missing_.size() > 3 ? ", ..." : "",
           "); fix the path, or pass --skip-unreadable to go on without them");
    warn(spec_, ": skipping ", missing_.size(), " listed images missing on disk (", examples,
         missing_.size() > 3 ? ", ..." : "", ")");
  }
}

DecodedImage FileDataset::load_decoded(int64_t i) const {
  // An archive is read front to back, never image by image: training and evaluation go through a prepared cache.
  VP_REQUIRE(!paths_[static_cast<size_t>(i)].empty(), spec_, ": ", items_[static_cast<size_t>(i)].name,
             " is inside the .tar.gz archives, which are read only by `vitpipe data prepare --data ", spec_,
             " --out CACHE`; then use --data cache:CACHE");
  return decode_image_file_keep_gray(paths_[static_cast<size_t>(i)], image_read_);
}

}  // namespace vitpipe
