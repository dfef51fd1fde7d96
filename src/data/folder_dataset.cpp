// folder:ROOT: one subfolder per class (single-label), images (.png/.jpg/.jpeg/.dcm/.dicom, or any file with a PNG,
// JPEG or DICOM signature, such as DICOM files named by their UID) anywhere below it. If ROOT's
// subfolders are train/ val/ test/ (ImageNet style), each holds the class folders and gives the split; otherwise
// everything is train_val and divided by image.
#include <algorithm>
#include <map>
#include <set>

#include "data/file_dataset.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> sorted_subfolders(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_directory() && entry.path().filename().string()[0] != '.') out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::shared_ptr<FileDataset> open_folder_dataset(const fs::path& root_in, const DatasetOptions& options) {
  VP_REQUIRE(fs::is_directory(root_in), "folder:", root_in.string(), ": not a directory");
  const fs::path root = fs::absolute(root_in).lexically_normal();
  std::vector<fs::path> top = sorted_subfolders(root);
  VP_REQUIRE(!top.empty(), root.string(), ": no class subfolders (expected ROOT/<class>/*.png)");

  std::map<std::string, SourceSplit> split_names = {{"train", SourceSplit::train},
                                                    {"val", SourceSplit::val},
                                                    {"valid", SourceSplit::val},
                                                    {"validation", SourceSplit::val},
                                                    {"test", SourceSplit::test}};
  const bool split_layout = std::all_of(
      top.begin(), top.end(), [&](const fs::path& p) { return split_names.count(p.filename().string()) > 0; });
  std::vector<std::pair<fs::path, SourceSplit>> class_parents;
  if (split_layout) {
    for (const auto& p : top) class_parents.emplace_back(p, split_names.at(p.filename().string()));
  } else {
    class_parents.emplace_back(root, SourceSplit::train_val);
  }

  struct Found {
    fs::path path;
    std::string class_name;
    SourceSplit split;
  };
  std::vector<Found> found;
  std::set<std::string> classes;
  for (const auto& [parent, split] : class_parents) {
    for (const auto& class_dir : sorted_subfolders(parent)) {
      const std::string class_name = class_dir.filename().string();
      classes.insert(class_name);
      size_t before = found.size();
      for (const auto& entry : fs::recursive_directory_iterator(class_dir))
        if (entry.is_regular_file() && is_image_file(entry.path())) found.push_back({entry.path(), class_name, split});
      std::sort(found.begin() + static_cast<std::ptrdiff_t>(before), found.end(),
                [](const Found& a, const Found& b) { return a.path < b.path; });
      if (found.size() == before)
        warn(class_dir.string(), ": no images (.png, .jpg, .jpeg, .dcm, DICOM) in class folder");
    }
  }
  VP_REQUIRE(!found.empty(), root.string(), ": no images (.png, .jpg, .jpeg, .dcm, DICOM) in any class folder");

  FileDataset::Source source;
  source.spec = "folder:" + root.string();
  source.kind = "folder";
  source.multi_label = false;
  source.label_names.assign(classes.begin(), classes.end());
  for (const auto& f : found) {
    SourceEntry entry;
    entry.item.name = f.path.lexically_relative(root).string();
    entry.item.labels = {
        static_cast<int32_t>(std::lower_bound(source.label_names.begin(), source.label_names.end(), f.class_name) -
                             source.label_names.begin())};
    entry.source_split = f.split;
    source.entries.push_back(std::move(entry));
    source.paths.push_back(f.path);
  }
  return std::make_shared<FileDataset>(std::move(source), options);
}

}  // namespace vitpipe
