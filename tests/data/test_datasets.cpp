// Datasets: the bundled ChestX-ray14 sample, the official split and the patient division, layouts, CSV and folder
// datasets, --data specs, and bad input.
#include <map>
#include <set>

#include "data/chestxray14_findings.h"
#include "data/csv_table.h"
#include "data/data_spec.h"
#include "data/dataset_summary.h"
#include "data/file_dataset.h"
#include "test_helpers.h"

namespace vitpipe {
namespace {

using testing::copy_sample;
using testing::expect_error;
using testing::fixtures_dir;
using testing::sample_dir;
using testing::TempDir;
using testing::write_file;
namespace fs = std::filesystem;

std::string sample_spec() { return "chestxray14:" + sample_dir().string(); }

void expect_patient_disjoint(const Dataset& d) {
  std::map<std::string, Split> split_of_patient;
  for (int64_t i = 0; i < d.size(); ++i) {
    auto [it, inserted] = split_of_patient.emplace(d.item(i).patient, d.item(i).split);
    ASSERT_EQ(it->second, d.item(i).split) << "patient " << d.item(i).patient << " is in two splits";
  }
}

TEST(ChestXray14Dataset, BundledSample) {
  auto d = open_dataset(sample_spec(), DatasetOptions{});
  EXPECT_EQ(d->kind(), "chestxray14");
  ASSERT_EQ(d->size(), 1000);
  EXPECT_EQ(d->label_names(), chestxray14_findings());
  const auto train = d->split_indices(Split::train), val = d->split_indices(Split::val),
             test = d->split_indices(Split::test);
  EXPECT_EQ(test.size(), 310u);                // README: 310 in the official test list
  EXPECT_EQ(train.size() + val.size(), 690u);  // and 690 in train_val
  EXPECT_GE(val.size(), 69u);                  // whole patients until >= 10%
  EXPECT_LT(val.size(), 69u + 40u);
  expect_patient_disjoint(*d);
  // Test images are exactly the official list.
  std::set<std::string> listed;
  for (const auto& name : read_line_list(sample_dir() / "test_list.txt")) listed.insert(name);
  for (int64_t i : test) EXPECT_TRUE(listed.count(d->name(i))) << d->name(i);
  // Labels: 00000001_000.png is Cardiomegaly, 00000002_000.png is No Finding (all zero).
  for (int64_t i = 0; i < d->size(); ++i) {
    std::vector<float> row(14);
    d->write_labels(i, row.data());
    if (d->name(i) == "00000001_000.png") {
      EXPECT_EQ(row, (std::vector<float>{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
    }
    if (d->name(i) == "00000002_000.png") {
      EXPECT_EQ(row, std::vector<float>(14, 0.0f));
    }
  }
}

TEST(ChestXray14Dataset, DivisionIsSeededAndFollowsTheFraction) {
  DatasetOptions a, b, c;
  b.seed = 0;
  c.seed = 7;
  c.val_fraction = 0.3;
  auto da = open_dataset(sample_spec(), a), db = open_dataset(sample_spec(), b), dc = open_dataset(sample_spec(), c);
  EXPECT_EQ(da->split_indices(Split::val), db->split_indices(Split::val));
  EXPECT_NE(da->split_indices(Split::val), dc->split_indices(Split::val));
  EXPECT_GE(dc->split_indices(Split::val).size(), 207u);  // 30% of 690
  EXPECT_EQ(dc->split_indices(Split::test).size(), 310u);
  expect_patient_disjoint(*dc);
  DatasetOptions none;
  none.val_fraction = 0;
  EXPECT_TRUE(open_dataset(sample_spec(), none)->split_indices(Split::val).empty());
  DatasetOptions bad;
  bad.val_fraction = 1.5;
  expect_error([&] { open_dataset(sample_spec(), bad); }, {"--val-fraction"});
}

TEST(ChestXray14Dataset, OfficialSplitOfTheFullLists) {
  // The full CSV and lists with only the 1,000 sample images on disk: the official split of all 112,120 rows.
  TempDir dir;
  for (const char* name : {"Data_Entry_2017.csv.gz", "train_val_list.txt.gz", "test_list.txt.gz"})
    fs::copy_file(fixtures_dir() / name, dir / name);
  fs::create_directory_symlink(sample_dir() / "images", dir / "images");
  DatasetOptions options;
  options.allow_missing = true;
  auto d = open_chestxray14_dataset(dir.path(), options);
  EXPECT_EQ(d->size(), 1000);
  EXPECT_EQ(d->missing().size(), 111120u);
  std::map<SourceSplit, int64_t> images;
  std::map<SourceSplit, std::set<std::string>> patients;
  for (const auto* list : {&d->source().entries, &d->source().missing})
    for (const auto& e : *list) {
      images[e.source_split]++;
      patients[e.source_split].insert(e.item.patient);
    }
  EXPECT_EQ(images[SourceSplit::train_val], 86524);  // README
  EXPECT_EQ(images[SourceSplit::test], 25596);
  EXPECT_EQ(images[SourceSplit::none], 0);
  EXPECT_EQ(patients[SourceSplit::train_val].size(), 28008u);
  EXPECT_EQ(patients[SourceSplit::test].size(), 2797u);
  for (const auto& p : patients[SourceSplit::test]) EXPECT_EQ(patients[SourceSplit::train_val].count(p), 0u) << p;

  // The division of all 86,524 train_val images by patient.
  std::vector<std::string> keys;
  for (const auto* list : {&d->source().entries, &d->source().missing})
    for (const auto& e : *list)
      if (e.source_split == SourceSplit::train_val) keys.push_back(e.item.patient);
  const auto is_val = choose_validation_items(keys, 0.1, 0);
  std::set<std::string> val_patients, train_patients;
  int64_t val_images = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    (is_val[i] ? val_patients : train_patients).insert(keys[i]);
    val_images += is_val[i];
  }
  EXPECT_GE(val_images, 8652);
  EXPECT_LT(val_images, 8652 + 200);
  for (const auto& p : val_patients) EXPECT_EQ(train_patients.count(p), 0u);

  // Without allow_missing, missing files stop the run, naming some of them.
  expect_error([&] { open_chestxray14_dataset(dir.path(), DatasetOptions{}); },
               {"111120 of 112120 listed images are missing", "--skip-unreadable"});
}

TEST(ChestXray14Dataset, KaggleLayoutEqualsFlatLayout) {
  TempDir dir;
  for (const char* name : {"Data_Entry_2017_v2020.csv", "train_val_list.txt", "test_list.txt"})
    fs::copy_file(sample_dir() / name, dir / name);
  int k = 0;
  for (const auto& e : fs::directory_iterator(sample_dir() / "images")) {
    const fs::path part = dir / (k++ % 2 ? "images_001" : "images_002") / "images";
    fs::create_directories(part);
    fs::create_symlink(e.path(), part / e.path().filename());
  }
  auto kaggle = open_dataset("chestxray14:" + dir.path().string(), DatasetOptions{});
  auto flat = open_dataset(sample_spec(), DatasetOptions{});
  ASSERT_EQ(kaggle->size(), flat->size());
  for (int64_t i = 0; i < flat->size(); ++i) {
    EXPECT_EQ(kaggle->name(i), flat->name(i));
    EXPECT_EQ(kaggle->item(i).split, flat->item(i).split);
    EXPECT_EQ(kaggle->file_path(i).filename(), flat->file_path(i).filename());
  }
}

TEST(ChestXray14Dataset, ViewFilterAndNoFindingLabel) {
  DatasetOptions pa;
  pa.view = "PA";
  auto d = open_dataset(sample_spec(), pa);
  EXPECT_EQ(d->size(), 637);  // README: 637 PA / 363 AP
  for (int64_t i = 0; i < d->size(); ++i) EXPECT_EQ(d->item(i).view, "PA");
  // Filtering never moves a patient between train and val.
  auto all = open_dataset(sample_spec(), DatasetOptions{});
  std::map<std::string, Split> split_of;
  for (int64_t i = 0; i < all->size(); ++i) split_of[all->name(i)] = all->item(i).split;
  for (int64_t i = 0; i < d->size(); ++i) EXPECT_EQ(d->item(i).split, split_of[d->name(i)]);

  DatasetOptions fifteen;
  fifteen.add_no_finding = true;
  auto f = open_dataset(sample_spec(), fifteen);
  ASSERT_EQ(f->num_labels(), 15);
  EXPECT_EQ(f->label_names().back(), "No Finding");
  int64_t no_finding = 0;
  for (int64_t i = 0; i < f->size(); ++i) {
    std::vector<float> row(15);
    f->write_labels(i, row.data());
    no_finding += row[14] == 1.0f;
    float sum = 0;
    for (float v : row) sum += v;
    EXPECT_GE(sum, 1.0f);
  }
  EXPECT_EQ(no_finding, 499);
}

TEST(ChestXray14Dataset, MissingImagesAndBadFolders) {
  TempDir dir;
  copy_sample(dir.path());
  fs::remove(dir / "images" / "00000001_000.png");
  expect_error([&] { open_dataset("chestxray14:" + dir.path().string(), DatasetOptions{}); },
               {"1 of 1000 listed images are missing", "00000001_000.png", "--skip-unreadable"});
  DatasetOptions skip;
  skip.skip_unreadable = true;
  auto d = open_dataset("chestxray14:" + dir.path().string(), skip);
  EXPECT_EQ(d->size(), 999);
  EXPECT_EQ(d->missing(), std::vector<std::string>{"00000001_000.png"});

  TempDir empty;
  expect_error([&] { open_dataset("chestxray14:" + empty.path().string(), DatasetOptions{}); }, {"Data_Entry_2017"});
  write_file(empty / "Data_Entry_2017.csv", "Image Index,Finding Labels,Patient ID,View Position\n");
  expect_error([&] { open_dataset("chestxray14:" + empty.path().string(), DatasetOptions{}); }, {"train_val_list.txt"});

  // An image in both lists is refused.
  TempDir both;
  copy_sample(both.path());
  write_file(both / "test_list.txt", read_file_maybe_gzip(sample_dir() / "test_list.txt") + "00000001_000.png\n");
  expect_error([&] { open_dataset("chestxray14:" + both.path().string(), DatasetOptions{}); },
               {"00000001_000.png is in both"});
}

TEST(DataSpec, KindsAndBarePaths) {
  EXPECT_EQ(parse_data_spec("chestxray14:/x").kind, "chestxray14");
  EXPECT_EQ(parse_data_spec("csv:a.csv").path, "a.csv");
  EXPECT_EQ(parse_data_spec(sample_dir().string()).kind, "chestxray14");
  expect_error([] { parse_data_spec("imagenet:/x"); }, {"unknown dataset kind \"imagenet\""});
  expect_error([] { parse_data_spec("cache:"); }, {"no path"});
  expect_error([] { parse_data_spec("/no/such/place"); }, {"no such file"});
}

TEST(CsvDataset, JoinedLabelsZeroOneColumnsAndSingleLabel) {
  TempDir dir;
  const std::string a = (sample_dir() / "images" / "00000001_000.png").string();
  const std::string b = (sample_dir() / "images" / "00000002_000.png").string();
  write_file(dir / "joined.csv", "path,labels,patient,split\n" + a + ",Mass|Nodule,p1,train\n" + b + ",,p2,test\n");
  auto j = open_dataset("csv:" + (dir / "joined.csv").string(), DatasetOptions{});
  EXPECT_TRUE(j->multi_label());
  EXPECT_EQ(j->label_names(), (std::vector<std::string>{"Mass", "Nodule"}));
  EXPECT_EQ(j->item(0).labels, (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(j->item(1).labels.empty());
  EXPECT_EQ(j->item(1).split, Split::test);

  fs::create_directories(dir / "img");
  fs::create_symlink(a, dir / "img" / "a.png");
  fs::create_symlink(b, dir / "img" / "b.png");
  write_file(dir / "columns.csv", "image,Mass,Nodule\nimg/a.png,1,0\nimg/b.png,1,1\n");
  auto c = open_dataset("csv:" + (dir / "columns.csv").string(), DatasetOptions{});
  EXPECT_TRUE(c->multi_label());
  EXPECT_EQ(c->item(1).labels, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(c->split_indices(Split::train).size() + c->split_indices(Split::val).size(), 2u);

  write_file(dir / "single.csv", "path,label\nimg/a.png,cat\nimg/b.png,dog\n");
  auto s = open_dataset("csv:" + (dir / "single.csv").string(), DatasetOptions{});
  EXPECT_FALSE(s->multi_label());
  EXPECT_EQ(s->class_index(1), 1);

  write_file(dir / "bad.csv", "path,Mass,Nodule\nimg/a.png,1,0\nimg/b.png,yes,1\n");
  expect_error([&] { open_dataset("csv:" + (dir / "bad.csv").string(), DatasetOptions{}); },
               {"bad.csv line 3", "\"Mass\"", "1.0, 0.0, -1.0"});
  write_file(dir / "missing.csv", "path,label\nimg/a.png,cat\nimg/zzz.png,dog\n");
  expect_error([&] { open_dataset("csv:" + (dir / "missing.csv").string(), DatasetOptions{}); },
               {"img/zzz.png", "missing"});
  // The path column left out: named as such, not read from the patient column as paths ("1, 1, ... missing").
  write_file(dir / "nopath.csv", "patient,split,AP\n1,train_val,0\n2,test,1\n");
  expect_error(
      [&] { open_dataset("csv:" + (dir / "nopath.csv").string(), DatasetOptions{}); },
      {"nopath.csv line 1: bad header: no image path column", "path, image_path", "\"patient\", is the patient"});
  write_file(dir / "split.csv", "path,label,split\nimg/a.png,cat,training-ish\n");
  expect_error([&] { open_dataset("csv:" + (dir / "split.csv").string(), DatasetOptions{}); },
               {"split.csv line 2", "unknown split"});
}

TEST(FolderDataset, ClassFoldersAndSplitLayout) {
  TempDir dir;
  int k = 0;
  for (const auto& e : fs::directory_iterator(sample_dir() / "images")) {
    if (k >= 12) break;
    fs::create_directories(dir / "flat" / (k % 3 == 0 ? "effusion" : "normal"));
    fs::create_symlink(e.path(), dir / "flat" / (k % 3 == 0 ? "effusion" : "normal") / e.path().filename());
    const char* split = k % 4 == 0 ? "test" : (k % 4 == 1 ? "val" : "train");
    fs::create_directories(dir / "split" / split / (k % 2 ? "a" : "b"));
    fs::create_symlink(e.path(), dir / "split" / split / (k % 2 ? "a" : "b") / e.path().filename());
    ++k;
  }
  write_file(dir / "flat" / "normal" / "notes.txt", "ignored");
  auto flat = open_dataset("folder:" + (dir / "flat").string(), DatasetOptions{});
  EXPECT_FALSE(flat->multi_label());
  EXPECT_EQ(flat->label_names(), (std::vector<std::string>{"effusion", "normal"}));
  EXPECT_EQ(flat->size(), 12);
  int64_t effusion = 0;
  for (int64_t i = 0; i < flat->size(); ++i) effusion += flat->class_index(i) == 0;
  EXPECT_EQ(effusion, 4);
  auto split = open_dataset("folder:" + (dir / "split").string(), DatasetOptions{});
  EXPECT_EQ(split->split_indices(Split::test).size(), 3u);
  EXPECT_EQ(split->split_indices(Split::val).size(), 3u);
  EXPECT_EQ(split->split_indices(Split::train).size(), 6u);
  TempDir empty;
  expect_error([&] { open_dataset("folder:" + empty.path().string(), DatasetOptions{}); }, {"no class subfolders"});
}

TEST(DatasetSummary, CountsOfTheSample) {
  auto summary = summarize_dataset(*open_dataset(sample_spec(), DatasetOptions{}));
  EXPECT_EQ(summary["total"], 1000);
  EXPECT_EQ(summary["missing"], 0);
  EXPECT_EQ(summary["splits"]["test"], 310);
  EXPECT_EQ(summary["label_counts"]["Effusion"], 170);
  EXPECT_EQ(summary["label_counts"]["No Finding"], 499);
  EXPECT_EQ(summary["views"]["PA"], 637);
  EXPECT_EQ(summary["patients_in_two_splits"], 0);
  EXPECT_NE(format_dataset_summary(summary).find("Effusion"), std::string::npos);
}

}  // namespace
}  // namespace vitpipe
