// The public chest X-ray datasets on synthetic roots laid out as each documents (CheXpert, MIMIC-CXR-JPG, PadChest,
// VinDr-CXR): counts, official splits, patients, views and labels under every --uncertain / --blank / --label-vote
// policy; csv: with blank, NaN and -1; --labels harmonisation; the cache keeping the label codes; masked labels in
// the loader's batches.
#include <map>
#include <set>

#include "data/chestxray14_findings.h"
#include "data/chexpert_observations.h"
#include "data/data_spec.h"
#include "data/dataset_summary.h"
#include "data/file_dataset.h"
#include "data/label_harmonisation.h"
#include "data/loader.h"
#include "data/packed_cache.h"
#include "data/png_encoder.h"
#include "data/sample_transform.h"
#include "test_helpers.h"
#include "util/atomic_file.h"

namespace vitpipe {
namespace {

using testing::expect_error;
using testing::sample_dir;
using testing::TempDir;
using testing::write_file;
namespace fs = std::filesystem;

// A decodable 8x8 gray PNG (whatever the file's extension says: decoding goes by signature).
void write_image(const fs::path& path, uint8_t value) {
  DecodedImage image;
  image.width = image.height = 8;
  image.channels = 1;
  image.pixels.assign(64, value);
  const std::vector<uint8_t> png = encode_png(image);
  fs::create_directories(path.parent_path());
  write_file(path, std::string(png.begin(), png.end()));
}

int64_t index_of(const Dataset& d, const std::string& label) {
  const auto& names = d.label_names();
  const auto it = std::find(names.begin(), names.end(), label);
  EXPECT_NE(it, names.end()) << label;
  return it - names.begin();
}

const DatasetItem& item_named(const Dataset& d, const std::string& name) {
  for (int64_t i = 0; i < d.size(); ++i)
    if (d.name(i) == name) return d.item(i);
  ADD_FAILURE() << "no item " << name;
  static DatasetItem none;
  return none;
}

bool has(const std::vector<int32_t>& list, int64_t label) {
  return std::find(list.begin(), list.end(), static_cast<int32_t>(label)) != list.end();
}

void expect_patient_disjoint(const Dataset& d) {
  std::map<std::string, Split> split_of_patient;
  for (int64_t i = 0; i < d.size(); ++i) {
    if (d.item(i).patient.empty()) continue;
    auto [it, inserted] = split_of_patient.emplace(d.item(i).patient, d.item(i).split);
    EXPECT_EQ(it->second, d.item(i).split) << "patient " << d.item(i).patient << " is in two splits";
  }
}

// --- CheXpert ---

const char* kChexpertHeader =
    "Path,Sex,Age,Frontal/Lateral,AP/PA,No Finding,Enlarged Cardiomediastinum,Cardiomegaly,Lung Opacity,Lung Lesion,"
    "Edema,Consolidation,Pneumonia,Atelectasis,Pneumothorax,Pleural Effusion,Pleural Other,Fracture,Support Devices\n";

// ROOT/CheXpert-v1.0-small/{train,valid}.csv; 12 training images of 6 patients, 3 validation images of 2.
fs::path make_chexpert(const fs::path& parent) {
  const fs::path root = parent / "CheXpert-v1.0-small";
  std::string train = kChexpertHeader, valid = kChexpertHeader;
  for (int p = 1; p <= 6; ++p) {
    for (int view = 1; view <= 2; ++view) {
      const std::string path = "CheXpert-v1.0-small/train/patient0000" + std::to_string(p) + "/study1/view" +
                               std::to_string(view) + (view == 1 ? "_frontal.jpg" : "_lateral.jpg");
      // Cardiomegaly (column 3) 1.0, Edema (6) -1.0, Pleural Effusion (11) blank, Atelectasis 0.0, the rest blank.
      train += path + ",Female,60," + (view == 1 ? "Frontal," + std::string(p % 2 ? "AP" : "PA") : "Lateral,") +
               ",,,1.0,,,-1.0,,,0.0,,,,,\n";
      write_image(parent / path, 10);
    }
  }
  for (int p = 7; p <= 8; ++p) {
    const std::string path = "CheXpert-v1.0-small/valid/patient0000" + std::to_string(p) + "/study1/view1_frontal.jpg";
    valid += path + ",Male,50,Frontal,PA,0.0,0.0,0.0,1.0,0.0,0.0,0.0,0.0,0.0,0.0,1.0,0.0,0.0,0.0\n";
    write_image(parent / path, 20);
  }
  valid +=
      "CheXpert-v1.0-small/valid/patient00008/study2/view1_frontal.jpg,Male,51,Frontal,AP,1.0,0.0,0.0,0.0,0.0,0.0,"
      "0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0\n";
  write_image(parent / "CheXpert-v1.0-small/valid/patient00008/study2/view1_frontal.jpg", 30);
  write_file(root / "train.csv", train);
  write_file(root / "valid.csv", valid);
  return root;
}

TEST(ChexpertDataset, SplitsPatientsViewsAndUncertaintyPolicies) {
  TempDir dir;
  const fs::path root = make_chexpert(dir.path());
  DatasetOptions options;
  options.val_fraction = 0.34;
  auto d = open_dataset("chexpert:" + root.string(), options);
  EXPECT_EQ(d->kind(), "chexpert");
  EXPECT_EQ(d->label_names(), chexpert_observations());
  ASSERT_EQ(d->size(), 15);
  EXPECT_EQ(d->split_indices(Split::test).size(), 3u);  // valid.csv is the official evaluation set
  EXPECT_EQ(d->split_indices(Split::train).size() + d->split_indices(Split::val).size(), 12u);
  EXPECT_EQ(d->split_indices(Split::val).size() % 2, 0u);  // whole patients (two images each)
  EXPECT_GE(d->split_indices(Split::val).size(), 4u);
  expect_patient_disjoint(*d);
  const std::string first = "CheXpert-v1.0-small/train/patient00001/study1/view1_frontal.jpg";
  EXPECT_EQ(item_named(*d, first).patient, "patient00001");
  EXPECT_EQ(item_named(*d, first).view, "AP");
  EXPECT_EQ(item_named(*d, "CheXpert-v1.0-small/train/patient00002/study1/view1_frontal.jpg").view, "PA");
  EXPECT_EQ(item_named(*d, "CheXpert-v1.0-small/train/patient00002/study1/view2_lateral.jpg").view, "LATERAL");

  const int64_t cardio = index_of(*d, "Cardiomegaly"), edema = index_of(*d, "Edema"),
                effusion = index_of(*d, "Pleural Effusion"), atelectasis = index_of(*d, "Atelectasis");
  // Defaults: --uncertain ignore (masked), --blank zeros (negative).
  const DatasetItem& item = item_named(*d, first);
  EXPECT_TRUE(has(item.labels, cardio));
  EXPECT_FALSE(has(item.labels, edema));
  EXPECT_TRUE(has(item.masked, edema));
  EXPECT_FALSE(has(item.masked, effusion));
  EXPECT_FALSE(has(item.labels, atelectasis) || has(item.masked, atelectasis));
  std::vector<float> weights(14);
  d->write_label_weights(0, weights.data());
  EXPECT_EQ(weights[static_cast<size_t>(edema)], 0.0f);
  EXPECT_EQ(weights[static_cast<size_t>(cardio)], 1.0f);
  EXPECT_TRUE(d->has_masked_labels());

  for (auto [policy, positive, masked] :
       {std::tuple{UncertainPolicy::ones, true, false}, std::tuple{UncertainPolicy::zeros, false, false},
        std::tuple{UncertainPolicy::ignore, false, true}}) {
    DatasetOptions o = options;
    o.uncertain = policy;
    auto p = open_dataset("chexpert:" + root.string(), o);
    const DatasetItem& i = item_named(*p, first);
    EXPECT_EQ(has(i.labels, edema), positive) << uncertain_policy_name(policy);
    EXPECT_EQ(has(i.masked, edema), masked) << uncertain_policy_name(policy);
    EXPECT_TRUE(has(i.labels, cardio));
  }
  DatasetOptions blank = options;
  blank.blank = BlankPolicy::ignore;
  auto b = open_dataset("chexpert:" + root.string(), blank);
  EXPECT_TRUE(has(item_named(*b, first).masked, effusion));
  EXPECT_FALSE(has(item_named(*b, first).masked, atelectasis));  // 0.0 is a real negative
  EXPECT_EQ(item_named(*b, first).masked.size(), 12u);           // 11 blanks + the uncertain Edema
  // The validation set has no blanks or uncertain labels.
  EXPECT_TRUE(item_named(*b, "CheXpert-v1.0-small/valid/patient00007/study1/view1_frontal.jpg").masked.empty());

  // `data inspect` counts the masked labels.
  const auto summary = summarize_dataset(*b);
  EXPECT_EQ(summary["masked_counts"]["Edema"].get<int64_t>(), 12);  // -1 in every training row
  EXPECT_EQ(summary["masked_counts"]["Atelectasis"].get<int64_t>(), 0);
  EXPECT_EQ(summary["label_counts"]["Cardiomegaly"].get<int64_t>(), 12);
  EXPECT_NE(format_dataset_summary(summary).find("masked"), std::string::npos);

  DatasetOptions frontal = options;
  frontal.view = "frontal";
  EXPECT_EQ(open_dataset("chexpert:" + root.string(), frontal)->size(), 9);
  frontal.view = "lateral";
  EXPECT_EQ(open_dataset("chexpert:" + root.string(), frontal)->size(), 6);
  frontal.view = "pa";
  EXPECT_EQ(open_dataset("chexpert:" + root.string(), frontal)->size(), 5);  // patients 2, 4, 6 + two valid
}

TEST(ChexpertDataset, UnknownValueNamesFileLineAndColumn) {
  TempDir dir;
  const fs::path root = make_chexpert(dir.path());
  std::string train = read_text_file(root / "train.csv");
  train.replace(train.find("-1.0"), 4, "2.0");
  write_file(root / "train.csv", train);
  expect_error([&] { open_dataset("chexpert:" + root.string(), DatasetOptions{}); },
               {"train.csv line 2", "\"Edema\"", "\"2.0\"", "-1.0 (uncertain)"});
  write_file(root / "train.csv", "Path,Sex\nx.jpg,F\n");
  expect_error([&] { open_dataset("chexpert:" + root.string(), DatasetOptions{}); },
               {"train.csv line 1", "\"No Finding\""});
}

// --- MIMIC-CXR-JPG ---

fs::path make_mimic(const fs::path& root, bool gzip_split = false) {
  std::string labels =
      "subject_id,study_id,Atelectasis,Cardiomegaly,Consolidation,Edema,Enlarged Cardiomediastinum,"
      "Fracture,Lung Lesion,Lung Opacity,No Finding,Pleural Effusion,Pleural Other,Pneumonia,"
      "Pneumothorax,Support Devices\n";
  std::string negbio = labels;
  labels += "10000032,50000001,1.0,,,-1.0,,,,,,0.0,,,,\n";  // two images
  labels += "10000032,50000002,,,,,,,,,1.0,,,,,\n";
  labels += "10000764,50000003,,1.0,,,,,,,,,,,,\n";
  labels += "19999999,59999999,,,1.0,,,,,,,,,,,\n";  // validate
  labels += "18888888,58888888,,,,,,,,,,1.0,,,,\n";  // test
  negbio +=
      "10000032,50000001,0.0,,,1.0,,,,,,,,,,\n10000032,50000002,,,,,,,,,1.0,,,,,\n"
      "10000764,50000003,,1.0,,,,,,,,,,,,\n19999999,59999999,,,1.0,,,,,,,,,,,\n"
      "18888888,58888888,,,,,,,,,,1.0,,,,\n";
  std::string split = "dicom_id,study_id,subject_id,split\n";
  std::string metadata = "dicom_id,subject_id,study_id,PerformedProcedureStepDescription,ViewPosition,Rows,Columns\n";
  const std::vector<std::tuple<std::string, std::string, std::string, std::string, std::string>> images = {
      {"aaa", "50000001", "10000032", "train", "PA"},    {"aab", "50000001", "10000032", "train", "LATERAL"},
      {"aac", "50000002", "10000032", "train", "AP"},    {"bbb", "50000003", "10000764", "train", "PA"},
      {"ccc", "59999999", "19999999", "validate", "AP"}, {"ddd", "58888888", "18888888", "test", "PA"},
      {"eee", "57777777", "17777777", "train", "PA"}};  // a study without a label row
  for (const auto& [id, study, subject, s, view] : images) {
    split += id + "," + study + "," + subject + "," + s + "\n";
    metadata += id + "," + subject + "," + study + ",CHEST," + view + ",8,8\n";
    write_image(root / "files" / ("p" + subject.substr(0, 2)) / ("p" + subject) / ("s" + study) / (id + ".jpg"), 50);
  }
  write_file(root / "mimic-cxr-2.0.0-chexpert.csv", labels);
  write_file(root / "mimic-cxr-2.0.0-negbio.csv", negbio);
  write_file(root / "mimic-cxr-2.0.0-metadata.csv", metadata);
  write_file(root / (gzip_split ? "unused.csv" : "mimic-cxr-2.0.0-split.csv"), split);
  return root;
}

TEST(MimicCxrDataset, OfficialSplitsStudiesShareLabelsSubjectsArePatients) {
  TempDir dir;
  const fs::path root = make_mimic(dir.path() / "mimic");
  auto d = open_dataset("mimic-cxr-jpg:" + root.string(), DatasetOptions{});
  EXPECT_EQ(d->kind(), "mimic-cxr-jpg");
  EXPECT_EQ(d->label_names(), chexpert_observations());
  ASSERT_EQ(d->size(), 6);  // the study without labels is left out
  EXPECT_EQ(d->split_indices(Split::train).size(), 4u);
  EXPECT_EQ(d->split_indices(Split::val).size(), 1u);
  EXPECT_EQ(d->split_indices(Split::test).size(), 1u);
  const DatasetItem& a = item_named(*d, "files/p10/p10000032/s50000001/aaa.jpg");
  const DatasetItem& b = item_named(*d, "files/p10/p10000032/s50000001/aab.jpg");
  EXPECT_EQ(a.labels, b.labels);  // one study, one set of labels
  EXPECT_EQ(a.masked, b.masked);
  EXPECT_EQ(a.patient, "10000032");
  EXPECT_EQ(a.view, "PA");
  EXPECT_EQ(b.view, "LATERAL");
  EXPECT_TRUE(has(a.labels, index_of(*d, "Atelectasis")));
  EXPECT_TRUE(has(a.masked, index_of(*d, "Edema")));  // -1.0, --uncertain ignore
  DatasetOptions negbio;
  negbio.mimic_labels = "negbio";
  auto n = open_dataset("mimic-cxr-jpg:" + root.string(), negbio);
  const DatasetItem& na = item_named(*n, "files/p10/p10000032/s50000001/aaa.jpg");
  EXPECT_FALSE(has(na.labels, index_of(*n, "Atelectasis")));
  EXPECT_TRUE(has(na.labels, index_of(*n, "Edema")));
  DatasetOptions frontal;
  frontal.view = "frontal";
  EXPECT_EQ(open_dataset("mimic-cxr-jpg:" + root.string(), frontal)->size(), 5);
}

// --- PadChest ---

TEST(PadchestDataset, LabelListsNormalExcludedAndPatientDivision) {
  TempDir dir;
  const fs::path root = dir.path() / "padchest";
  std::string csv =
      "ImageID,ImageDir,StudyDate_DICOM,StudyID,PatientID,PatientBirth,Projection,MethodProjection,Labels\n";
  csv += "a.png,0,20150101,s1,p1,1950,PA,Manual review of DICOM fields,['normal']\n";
  csv += "b.png,0,20150101,s1,p1,1950,L,Manual review of DICOM fields,\"['pleural effusion', ' cardiomegaly']\"\n";
  csv +=
      "c.png,1,20150101,s2,p2,1960,AP_horizontal,Manual review of DICOM fields,\"['cardiomegaly', \"\"hilar "
      "enlargement\"\"]\"\n";
  csv += "d.png,1,20150101,s3,p3,1970,PA,Manual review of DICOM fields,\"['exclude']\"\n";
  csv += "e.png,1,20150101,s4,p4,1970,PA,Manual review of DICOM fields,\n";
  csv += "f.png,2,20150101,s5,p5,1970,COSTAL,Manual review of DICOM fields,\"['nodule']\"\n";
  write_file(root / "PADCHEST_chest_x_ray_images_labels_160K_01.02.19.csv", csv);
  for (const auto& [folder, name] : std::vector<std::pair<std::string, std::string>>{
           {"0", "a.png"}, {"0", "b.png"}, {"1", "c.png"}, {"1", "d.png"}, {"1", "e.png"}})
    write_image(root / folder / name, 5);
  write_image(root / "images" / "f.png", 5);  // the flat layout works too
  auto d = open_dataset("padchest:" + root.string(), DatasetOptions{});
  EXPECT_EQ(d->kind(), "padchest");
  EXPECT_EQ(d->label_names(),
            (std::vector<std::string>{"cardiomegaly", "hilar enlargement", "nodule", "pleural effusion"}));
  ASSERT_EQ(d->size(), 4);                                // exclude and the blank row are left out
  EXPECT_TRUE(item_named(*d, "0/a.png").labels.empty());  // normal
  EXPECT_EQ(item_named(*d, "0/b.png").labels, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(item_named(*d, "1/c.png").labels, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(item_named(*d, "1/c.png").view, "AP_horizontal");
  EXPECT_EQ(item_named(*d, "0/b.png").patient, "p1");
  for (int64_t i = 0; i < d->size(); ++i) EXPECT_NE(d->item(i).split, Split::test);  // no official test split
  expect_patient_disjoint(*d);
  DatasetOptions frontal;
  frontal.view = "frontal";
  EXPECT_EQ(open_dataset("padchest:" + root.string(), frontal)->size(), 2);  // PA and AP_horizontal
  write_file(root / "PADCHEST_chest_x_ray_images_labels_160K_01.02.19.csv",
             "ImageID,ImageDir,PatientID,Labels\na.png,0,p1,pleural effusion\n");
  expect_error([&] { open_dataset("padchest:" + root.string(), DatasetOptions{}); },
               {"line 2", "\"Labels\"", "['pleural effusion', 'cardiomegaly']"});
}

// --- VinDr-CXR ---

fs::path make_vindr(const fs::path& root) {
  std::string train = "image_id,rad_id,Aortic enlargement,Cardiomegaly,Other diseases,No finding\n";
  // img1: Cardiomegaly by 1 of 3 readers, Aortic enlargement by 2 of 3; img2: No finding by all.
  train += "img1,R1,1,1,0,0\nimg1,R2,1,0,0,0\nimg1,R3,0,0,0,0\n";
  train += "img2,R1,0,0,0,1\nimg2,R2,0,0,0,1\nimg2,R3,0,0,0,1\n";
  write_file(root / "annotations" / "image_labels_train.csv", train);
  write_file(root / "annotations" / "image_labels_test.csv",
             "image_id,Aortic enlargement,Cardiomegaly,Other disease,No finding\nimg3,0,1,1,0\n");
  for (const char* path : {"train/img1.dicom", "train/img2.dicom", "test/img3.dicom"}) write_file(root / path, "x");
  return root;
}

TEST(VindrCxrDataset, ReaderVotesAndOfficialTestSet) {
  TempDir dir;
  const fs::path root = make_vindr(dir.path() / "vindr");
  DatasetOptions any;
  any.val_fraction = 0;
  auto d = open_dataset("vindr-cxr:" + root.string(), any);
  EXPECT_EQ(d->label_names(),
            (std::vector<std::string>{"Aortic enlargement", "Cardiomegaly", "Other diseases", "No finding"}));
  ASSERT_EQ(d->size(), 3);
  EXPECT_EQ(d->split_indices(Split::test).size(), 1u);
  EXPECT_EQ(item_named(*d, "train/img1").labels, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(item_named(*d, "train/img2").labels, (std::vector<int32_t>{3}));
  EXPECT_EQ(item_named(*d, "test/img3").labels, (std::vector<int32_t>{1, 2}));  // "Other disease" = "Other diseases"
  DatasetOptions majority = any;
  majority.label_vote = LabelVote::majority;
  auto m = open_dataset("vindr-cxr:" + root.string(), majority);
  EXPECT_EQ(item_named(*m, "train/img1").labels, (std::vector<int32_t>{0}));  // 2 of 3 yes, 1 of 3 no
  EXPECT_EQ(item_named(*m, "test/img3").labels, (std::vector<int32_t>{1, 2}));
  write_file(root / "annotations" / "image_labels_train.csv",
             "image_id,rad_id,Aortic enlargement,Cardiomegaly,Other diseases,No finding\nimg1,R1,1,0.5,0,0\n");
  expect_error([&] { open_dataset("vindr-cxr:" + root.string(), any); },
               {"image_labels_train.csv line 2", "\"Cardiomegaly\"", "0.5"});
}

// --- csv: blank, NaN and -1 ---

TEST(CsvDataset, BlankNanAndMinusOneReadAsCheXpertDoes) {
  TempDir dir;
  for (const char* name : {"a.png", "b.png", "c.png"}) write_image(dir / name, 1);
  write_file(dir / "labels.csv", "path,Mass,Nodule,Edema\na.png,1,,-1\nb.png,0.0,NaN,1.0\nc.png,-1.0,0,\n");
  auto d = open_dataset("csv:" + (dir / "labels.csv").string(), DatasetOptions{});
  ASSERT_EQ(d->size(), 3);
  EXPECT_TRUE(d->multi_label());
  EXPECT_EQ(item_named(*d, "a.png").labels, (std::vector<int32_t>{0}));
  EXPECT_EQ(item_named(*d, "a.png").masked, (std::vector<int32_t>{2}));  // -1: --uncertain ignore
  EXPECT_TRUE(item_named(*d, "b.png").masked.empty());                   // NaN: blank, --blank zeros
  DatasetOptions o;
  o.blank = BlankPolicy::ignore;
  o.uncertain = UncertainPolicy::ones;
  auto p = open_dataset("csv:" + (dir / "labels.csv").string(), o);
  EXPECT_EQ(item_named(*p, "a.png").labels, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(item_named(*p, "a.png").masked, (std::vector<int32_t>{1}));
  EXPECT_EQ(item_named(*p, "b.png").masked, (std::vector<int32_t>{1}));
  EXPECT_EQ(item_named(*p, "c.png").labels, (std::vector<int32_t>{0}));
  EXPECT_EQ(item_named(*p, "c.png").masked, (std::vector<int32_t>{2}));
}

// --- --labels ---

TEST(LabelHarmonisation, ChestXray14OntoCheXpertAndUnion) {
  DatasetOptions o;
  o.labels = "chexpert";
  auto d = open_dataset("chestxray14:" + sample_dir().string(), o);
  EXPECT_EQ(d->label_names(), chexpert_observations());
  const LabelMapping m = map_labels(chestxray14_findings(), named_label_set("chexpert"));
  std::map<std::string, std::string> mapped(m.mapped.begin(), m.mapped.end());
  EXPECT_EQ(mapped.size(), 7u);
  EXPECT_EQ(mapped["Pleural Effusion"], "Effusion");
  EXPECT_EQ(mapped["Cardiomegaly"], "Cardiomegaly");
  EXPECT_EQ(m.unmapped.size(), 7u);  // No Finding, Enlarged Cardiomediastinum, Lung Opacity, ... masked
  EXPECT_EQ(m.unused.size(), 7u);    // Emphysema, Fibrosis, Hernia, Infiltration, Mass, Nodule, Pleural_Thickening
  // An unmapped label is unknown for every image; a mapped one keeps its positives.
  auto original = open_dataset("chestxray14:" + sample_dir().string(), DatasetOptions{});
  const int64_t lung_opacity = index_of(*d, "Lung Opacity"), effusion = index_of(*d, "Pleural Effusion");
  const int64_t nih_effusion = index_of(*original, "Effusion");
  int64_t positives = 0, nih_positives = 0;
  for (int64_t i = 0; i < d->size(); ++i) {
    EXPECT_TRUE(has(d->item(i).masked, lung_opacity));
    positives += has(d->item(i).labels, effusion);
    nih_positives += has(original->item(i).labels, nih_effusion);
  }
  EXPECT_EQ(positives, nih_positives);
  EXPECT_GT(positives, 0);
  EXPECT_EQ(named_label_set("union").names.size(), 21u);
  // Other datasets' spellings meet in one label.
  const LabelMapping padchest =
      map_labels({"pleural effusion", "normal", "hiatal hernia", "pulmonary fibrosis"}, named_label_set("union"));
  std::map<std::string, std::string> p(padchest.mapped.begin(), padchest.mapped.end());
  EXPECT_EQ(p["Effusion"], "pleural effusion");
  EXPECT_EQ(p["No Finding"], "normal");
  EXPECT_EQ(p["Hernia"], "hiatal hernia");
  EXPECT_EQ(p["Fibrosis"], "pulmonary fibrosis");
}

TEST(LabelHarmonisation, JsonFileWithSynonyms) {
  TempDir dir;
  write_file(dir / "labels.json", R"({"labels": ["Heart", "Effusion"], "synonyms": {"Cardiomegaly": "Heart"}})");
  const LabelMapping m = map_labels(chestxray14_findings(), named_label_set((dir / "labels.json").string()));
  EXPECT_EQ(m.mapped,
            (std::vector<std::pair<std::string, std::string>>{{"Heart", "Cardiomegaly"}, {"Effusion", "Effusion"}}));
  write_file(dir / "bad.json", R"({"labels": ["Heart"], "synonyms": {"Cardiomegaly": "Lung"}})");
  expect_error([&] { named_label_set((dir / "bad.json").string()); }, {"bad.json", "\"Lung\"", "not in \"labels\""});
  expect_error([&] { named_label_set("chexpret"); }, {"--labels chexpret", "chestxray14, chexpert, union"});
}

// --- the cache keeps the codes; the loader carries the masks ---

TEST(ChestDatasetsCache, PoliciesApplyWhenTheCacheIsOpened) {
  TempDir dir;
  const fs::path root = make_chexpert(dir.path());
  const std::string spec = "chexpert:" + root.string();
  PrepareCacheOptions prepare;
  prepare.image_size = 8;
  prepare.threads = 1;
  prepare.progress = false;
  prepare_packed_cache(*open_file_dataset(parse_data_spec(spec), DatasetOptions{}), dir / "cache", prepare);
  const std::string cache = "cache:" + (dir / "cache").string();
  for (auto uncertain : {UncertainPolicy::ones, UncertainPolicy::zeros, UncertainPolicy::ignore}) {
    for (auto blank : {BlankPolicy::zeros, BlankPolicy::ignore}) {
      DatasetOptions o;
      o.uncertain = uncertain;
      o.blank = blank;
      auto files = open_dataset(spec, o), cached = open_dataset(cache, o);
      ASSERT_EQ(files->size(), cached->size());
      for (int64_t i = 0; i < files->size(); ++i) {
        EXPECT_EQ(files->item(i).labels, cached->item(i).labels) << i;
        EXPECT_EQ(files->item(i).masked, cached->item(i).masked) << i;
        EXPECT_EQ(files->item(i).split, cached->item(i).split) << i;
      }
    }
  }
  // The loader's batches carry the masks as weights.
  auto d = open_dataset(cache, DatasetOptions{});
  PreprocessorConfig config;
  config.height = config.width = 8;
  LoaderOptions lo = evaluation_loader_options(4);
  lo.threads = 1;
  Loader loader(d, d->split_indices(Split::train), config, lo);
  ASSERT_TRUE(loader.label_weights());
  loader.start_epoch(0);
  Batch batch;
  ASSERT_TRUE(loader.next(&batch));
  std::vector<float> expected(14);
  for (int64_t r = 0; r < batch.size(); ++r) {
    d->write_label_weights(batch.indices[static_cast<size_t>(r)], expected.data());
    for (int64_t l = 0; l < 14; ++l) EXPECT_EQ(batch.label_weights.f32()[r * 14 + l], expected[l]);
  }
}

TEST(ChestDatasetsCache, ListingAndReadingOptionsMustMatch) {
  TempDir dir;
  const fs::path root = make_mimic(dir.path() / "mimic");
  const std::string spec = "mimic-cxr-jpg:" + root.string();
  PrepareCacheOptions prepare;
  prepare.image_size = 8;
  prepare.threads = 1;
  prepare.progress = false;
  prepare_packed_cache(*open_file_dataset(parse_data_spec(spec), DatasetOptions{}), dir / "cache", prepare);
  DatasetOptions negbio;
  negbio.mimic_labels = "negbio";
  expect_error([&] { open_dataset("cache:" + (dir / "cache").string(), negbio); },
               {"was prepared with --mimic-labels chexpert", "not negbio"});
  // A model that reads images otherwise refuses the cache (the default reading is `auto`).
  auto cache = open_dataset("cache:" + (dir / "cache").string(), DatasetOptions{});
  PreprocessorConfig config;
  config.height = config.width = 8;
  config.vitpipe_intensity = {{"intensity", "pillow"}, {"dicom_window", "first"}};
  expect_error([&] { check_cache_matches_model(*cache, config); },
               {"reads images with intensity auto", "asks for intensity pillow", "vitpipe data prepare"});
  config.vitpipe_intensity = nullptr;
  check_cache_matches_model(*cache, config);
}

}  // namespace
}  // namespace vitpipe
