// ChestX-ray14 on disk: ROOT/Data_Entry_2017_v2020.csv (or Data_Entry_2017.csv, either possibly .gz),
// ROOT/train_val_list.txt, ROOT/test_list.txt, images flat in ROOT/images/ or in ROOT/images_0XX/images/ (Kaggle),
// or still in the archives NIH ships, ROOT/images_001.tar.gz .. images_012.tar.gz (read by `data prepare` alone).
#include <algorithm>
#include <unordered_map>

#include "data/chestxray14_findings.h"
#include "data/chestxray14_metadata.h"
#include "data/csv_table.h"
#include "data/file_dataset.h"
#include "data/image_archive.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

fs::path first_existing(const fs::path& root, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    fs::path p = root / name;
    if (fs::is_regular_file(p)) return p;
  }
  return {};
}

// ROOT/images/ and every ROOT/images_*/images/ (or ROOT/images_*/ itself).
std::vector<fs::path> image_folders(const fs::path& root) {
  std::vector<fs::path> folders;
  if (fs::is_directory(root / "images")) folders.push_back(root / "images");
  std::vector<fs::path> parts;
  for (const auto& entry : fs::directory_iterator(root)) {
    std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("images_", 0) == 0) parts.push_back(entry.path());
  }
  std::sort(parts.begin(), parts.end());
  for (const auto& part : parts) folders.push_back(fs::is_directory(part / "images") ? part / "images" : part);
  return folders;
}

// ROOT/images*.tar.gz (.tgz, .tar), in name order.
std::vector<fs::path> image_archives(const fs::path& root) {
  std::vector<fs::path> archives;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_regular_file() && entry.path().filename().string().starts_with("images") &&
        is_image_archive_name(entry.path()))
      archives.push_back(entry.path());
  std::sort(archives.begin(), archives.end());
  return archives;
}

// Image name -> file, over `folders`.
std::unordered_map<std::string, fs::path> index_image_files(const fs::path& root,
                                                            const std::vector<fs::path>& folders) {
  std::unordered_map<std::string, fs::path> files;
  for (const auto& folder : folders) {
    for (const auto& entry : fs::directory_iterator(folder)) {
      if (!entry.is_regular_file() || !is_image_file_name(entry.path())) continue;
      auto [it, inserted] = files.emplace(entry.path().filename().string(), entry.path());
      if (!inserted)
        warn(root.string(), ": ", it->first, " is in two image folders (", it->second.string(), " and ",
             entry.path().string(), "); using the first");
    }
  }
  return files;
}

}  // namespace

std::shared_ptr<FileDataset> open_chestxray14_dataset(const fs::path& root_in, const DatasetOptions& options) {
  VP_REQUIRE(fs::is_directory(root_in), "chestxray14:", root_in.string(), ": not a directory");
  const fs::path root = fs::absolute(root_in).lexically_normal();
  const fs::path csv = first_existing(root, {"Data_Entry_2017_v2020.csv", "Data_Entry_2017_v2020.csv.gz",
                                             "Data_Entry_2017.csv", "Data_Entry_2017.csv.gz"});
  VP_REQUIRE(!csv.empty(), root.string(), ": no Data_Entry_2017_v2020.csv or Data_Entry_2017.csv (NIH's label file)");
  const fs::path train_val = first_existing(root, {"train_val_list.txt", "train_val_list.txt.gz"});
  const fs::path test = first_existing(root, {"test_list.txt", "test_list.txt.gz"});
  VP_REQUIRE(!train_val.empty() && !test.empty(), root.string(),
             ": missing train_val_list.txt or test_list.txt (NIH's official split lists)");

  std::vector<ChestXray14Record> records = read_chestxray14_csv(csv);
  std::unordered_map<std::string, size_t> record_of;
  for (size_t i = 0; i < records.size(); ++i) record_of.emplace(records[i].image, i);

  std::vector<SourceSplit> split_of(records.size(), SourceSplit::none);
  std::vector<const fs::path*> list_of(records.size(), nullptr);
  for (const auto& [list, split] :
       {std::pair{&train_val, SourceSplit::train_val}, std::pair{&test, SourceSplit::test}}) {
    int64_t unknown = 0;
    std::string first_unknown;
    for (const auto& name : read_line_list(*list)) {
      auto it = record_of.find(name);
      if (it == record_of.end()) {
        if (unknown++ == 0) first_unknown = name;
        continue;
      }
      VP_REQUIRE(list_of[it->second] == nullptr || list_of[it->second] == list, name, " is in both ",
                 list_of[it->second]->filename().string(), " and ", list->filename().string());
      split_of[it->second] = split;
      list_of[it->second] = list;
    }
    if (unknown > 0)
      info(list->string(), ": ", unknown, " listed images are not in ", csv.filename().string(), " (e.g. ",
           first_unknown, "); ignored");
  }

  FileDataset::Source source;
  source.spec = "chestxray14:" + root.string();
  source.kind = "chestxray14";
  source.label_names = chestxray14_findings();
  source.multi_label = true;
  source.no_finding_allowed = true;
  source.metadata_files = {csv, train_val, test};
  const std::vector<fs::path> folders = image_folders(root);
  // Unpacked images win over archives beside them: they can be read one by one.
  if (folders.empty()) {
    source.archives = image_archives(root);
  } else if (!image_archives(root).empty()) {
    info(root.string(), ": reading the unpacked image folders; the images*.tar.gz archives beside them are not read");
  }
  VP_REQUIRE(!folders.empty() || !source.archives.empty(), root.string(),
             ": no images/ folder (expected ROOT/images/*.png, the Kaggle layout ROOT/images_001/images/*.png, or "
             "NIH's archives ROOT/images_001.tar.gz ..)");
  const auto files = index_image_files(root, folders);
  for (size_t i = 0; i < records.size(); ++i) {
    SourceEntry entry;
    entry.item.name = records[i].image;
    entry.item.labels = records[i].findings;
    entry.item.patient = std::to_string(records[i].patient_id);
    entry.item.view = records[i].view;
    entry.item.sex = records[i].gender;
    entry.item.age_years = records[i].age_years;
    entry.source_split = split_of[i];
    auto found = files.find(records[i].image);
    if (!source.archives.empty()) {  // which archive holds it (if any) is known once `data prepare` reads them
      source.entries.push_back(std::move(entry));
      source.paths.emplace_back();
    } else if (found == files.end()) {
      source.missing.push_back(std::move(entry));
    } else {
      source.entries.push_back(std::move(entry));
      source.paths.push_back(found->second);
    }
  }
  return std::make_shared<FileDataset>(std::move(source), options);
}

}  // namespace vitpipe
