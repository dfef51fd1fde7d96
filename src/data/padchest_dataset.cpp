// padchest:ROOT (BIMCV PadChest): ROOT/PADCHEST_chest_x_ray_images_labels_160K_01.02.19.csv (or any
// PADCHEST_*.csv, possibly .gz) with ImageID, ImageDir, PatientID, Projection and Labels, a Python list literal
// ("['pleural effusion', 'cardiomegaly']"; "['normal']" = no finding). Images (16-bit PNGs) at
// ROOT/<ImageDir>/<ImageID>, or ROOT/images/<ImageID>. Labels: every name the Labels column uses except "normal";
// rows with an empty Labels cell or the "exclude" label are left out (and counted). PadChest has no official split:
// every image is in the train_val pool, divided by patient into train and val. Views: the Projection column (PA,
// AP, AP_horizontal, L, COSTAL).
#include <algorithm>
#include <map>
#include <set>

#include "data/csv_table.h"
#include "data/file_dataset.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {
namespace {

namespace fs = std::filesystem;

fs::path find_label_file(const fs::path& root) {
  const fs::path usual = root / "PADCHEST_chest_x_ray_images_labels_160K_01.02.19.csv";
  for (const fs::path& p : {usual, fs::path(usual.string() + ".gz")})
    if (fs::is_regular_file(p)) return p;
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    const bool csv = name.size() > 4 && (name.compare(name.size() - 4, 4, ".csv") == 0 ||
                                         (name.size() > 7 && name.compare(name.size() - 7, 7, ".csv.gz") == 0));
    if (entry.is_regular_file() && name.rfind("PADCHEST_", 0) == 0 && csv) found.push_back(entry.path());
  }
  std::sort(found.begin(), found.end());
  return found.empty() ? fs::path() : found.front();
}

// "['a', 'b']" -> {"a", "b"}, trimmed; false when the cell is not such a list.
bool parse_label_list(const std::string& cell, std::vector<std::string>* out) {
  size_t i = 0;
  auto skip_space = [&] {
    while (i < cell.size() && cell[i] == ' ') ++i;
  };
  skip_space();
  if (i >= cell.size() || cell[i] != '[') return false;
  ++i;
  skip_space();
  if (i < cell.size() && cell[i] == ']') return true;
  while (i < cell.size()) {
    skip_space();
    if (i >= cell.size() || (cell[i] != '\'' && cell[i] != '"')) return false;
    const char quote = cell[i++];
    const size_t end = cell.find(quote, i);
    if (end == std::string::npos) return false;
    std::string label = cell.substr(i, end - i);
    label.erase(0, label.find_first_not_of(' '));
    label.erase(label.find_last_not_of(' ') + 1);
    if (!label.empty()) out->push_back(label);
    i = end + 1;
    skip_space();
    if (i < cell.size() && cell[i] == ',') {
      ++i;
      continue;
    }
    if (i < cell.size() && cell[i] == ']') return true;
    return false;
  }
  return false;
}

int required_column(const CsvTable& table, const std::string& name) {
  const int c = table.column(name);
  VP_REQUIRE(c >= 0, table.source, " line 1: no \"", name, "\" column (PadChest's label file)");
  return c;
}

}  // namespace

std::shared_ptr<FileDataset> open_padchest_dataset(const fs::path& root_in, const DatasetOptions& options) {
  VP_REQUIRE(fs::is_directory(root_in), "padchest:", root_in.string(), ": not a directory");
  const fs::path root = fs::absolute(root_in).lexically_normal();
  const fs::path csv = find_label_file(root);
  VP_REQUIRE(!csv.empty(), root.string(), ": no PADCHEST_chest_x_ray_images_labels_160K_01.02.19.csv (PadChest's ",
             "label file)");
  const CsvTable table = read_csv(csv);
  const int id_col = required_column(table, "ImageID"), dir_col = required_column(table, "ImageDir"),
            patient_col = required_column(table, "PatientID"), labels_col = required_column(table, "Labels");
  const int projection_col = table.column("Projection");

  struct Row {
    size_t row;
    std::vector<std::string> labels;
  };
  std::vector<Row> rows;
  std::set<std::string> names;
  int64_t unlabelled = 0, excluded = 0;
  for (size_t r = 0; r < table.rows.size(); ++r) {
    const std::string& cell = table.rows[r][labels_col];
    if (cell.empty() || cell == "nan" || cell == "NaN") {
      ++unlabelled;
      continue;
    }
    Row row{r, {}};
    VP_REQUIRE(parse_label_list(cell, &row.labels), table.where(r), ": column \"Labels\" holds \"", cell,
               "\" (expected a list like ['pleural effusion', 'cardiomegaly'])");
    if (std::find(row.labels.begin(), row.labels.end(), "exclude") != row.labels.end()) {
      ++excluded;
      continue;
    }
    row.labels.erase(std::remove(row.labels.begin(), row.labels.end(), "normal"), row.labels.end());
    names.insert(row.labels.begin(), row.labels.end());
    rows.push_back(std::move(row));
  }
  if (unlabelled + excluded > 0)
    info(csv.string(), ": ", unlabelled, " images without labels and ", excluded, " marked \"exclude\" are left out");

  FileDataset::Source source;
  source.spec = "padchest:" + root.string();
  source.kind = "padchest";
  source.label_names.assign(names.begin(), names.end());
  VP_REQUIRE(!source.label_names.empty(), csv.string(), ": no labels other than \"normal\" in any row");
  source.multi_label = true;
  source.no_finding_allowed = true;
  source.metadata_files = {csv};
  std::map<std::string, int32_t> index;
  for (size_t k = 0; k < source.label_names.size(); ++k) index[source.label_names[k]] = static_cast<int32_t>(k);
  for (const Row& row : rows) {
    const auto& cells = table.rows[row.row];
    SourceEntry entry;
    entry.item.name = cells[dir_col] + "/" + cells[id_col];
    for (const auto& label : row.labels) entry.item.labels.push_back(index.at(label));
    std::sort(entry.item.labels.begin(), entry.item.labels.end());
    entry.item.labels.erase(std::unique(entry.item.labels.begin(), entry.item.labels.end()), entry.item.labels.end());
    entry.item.patient = cells[patient_col];
    if (projection_col >= 0) entry.item.view = cells[projection_col];
    entry.source_split = SourceSplit::train_val;
    fs::path path = root / cells[dir_col] / cells[id_col];
    if (!fs::is_regular_file(path)) path = root / "images" / cells[id_col];
    if (fs::is_regular_file(path)) {
      source.entries.push_back(std::move(entry));
      source.paths.push_back(path);
    } else {
      source.missing.push_back(std::move(entry));
    }
  }
  return std::make_shared<FileDataset>(std::move(source), options);
}

}  // namespace vitpipe
