#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/hf_config.h"
#include "io/preprocessor_config.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe {
namespace {

using Json = nlohmann::json;

std::string fixture(const std::string& name) { return std::string(VITPIPE_SOURCE_DIR) + "/tests/io/fixtures/" + name; }

void expect_config_error(const std::string& text, const std::string& fragment) {
  try {
    parse_hf_config_text(text, "config.json");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "expected: " << fragment << "\n     got: " << e.what();
  }
}

// A config.json with one field replaced (or removed when `value` is discarded).
std::string with_field(const std::string& key, const Json& value) {
  Json json = Json::parse(read_text_file(fixture("google_vit-base-patch16-224.config.json")));
  if (value.is_discarded()) {
    json.erase(key);
  } else {
    json[key] = value;
  }
  return json.dump();
}

TEST(HfConfig, ReadsTheIn21kBackbone) {
  HfConfig hf = read_hf_config(fixture("google_vit-base-patch16-224-in21k.config.json"));
  const ViTConfig& c = hf.config;
  EXPECT_EQ(c.hidden_size, 768);
  EXPECT_EQ(c.num_hidden_layers, 12);
  EXPECT_EQ(c.num_attention_heads, 12);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.image_size, 224);
  EXPECT_EQ(c.patch_size, 16);
  EXPECT_EQ(c.num_channels, 3);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_DOUBLE_EQ(c.layer_norm_eps, 1e-12);
  EXPECT_DOUBLE_EQ(c.initializer_range, 0.02);
  EXPECT_EQ(c.model_type, "vit");
  EXPECT_EQ(hf.architectures, std::vector<std::string>{"ViTModel"});
  // No id2label: transformers' default of two placeholder labels.
  EXPECT_FALSE(hf.has_id2label);
  EXPECT_EQ(c.labels, (std::vector<std::string>{"LABEL_0", "LABEL_1"}));
  EXPECT_FALSE(hf.has_problem_type);
  EXPECT_EQ(hf.extra["_name_or_path"], "google/vit-base-patch16-224-in21k");
  EXPECT_FALSE(hf.extra.contains("hidden_size"));
}

TEST(HfConfig, ReadsImageNetClassifierLabelsInIdOrder) {
  HfConfig hf = read_hf_config(fixture("google_vit-base-patch16-224.config.json"));
  ASSERT_EQ(hf.config.labels.size(), 5u);
  EXPECT_EQ(hf.config.labels[0], "tench, Tinca tinca");
  EXPECT_EQ(hf.config.labels[4], "hammerhead, hammerhead shark");
  EXPECT_TRUE(hf.has_id2label);
  EXPECT_EQ(hf.architectures, std::vector<std::string>{"ViTForImageClassification"});
}

TEST(HfConfig, ReadsDeitTinyAsViT) {
  HfConfig hf = read_hf_config(fixture("facebook_deit-tiny-patch16-224.config.json"));
  EXPECT_EQ(hf.config.hidden_size, 192);
  EXPECT_EQ(hf.config.num_attention_heads, 3);
  EXPECT_EQ(hf.config.intermediate_size, 768);
  EXPECT_EQ(hf.torch_dtype, "float32");
  EXPECT_EQ(hf.config.labels.size(), 3u);
}

TEST(HfConfig, ReadsDistilledDeitWithBothHeads) {
  HfConfig hf = read_hf_config(fixture("facebook_deit-tiny-distilled-patch16-224.config.json"));
  EXPECT_EQ(hf.config.model_type, "deit");
  EXPECT_TRUE(hf.config.distillation_token);
  EXPECT_EQ(hf.config.head, HeadKind::cls_and_distillation);
  EXPECT_EQ(hf.config.tokens(), 14 * 14 + 2);
}

TEST(HfConfig, AcceptsDeitModelTypeAndDtypeSpellings) {
  HfConfig hf = parse_hf_config_text(with_field("model_type", "deit"), "config.json");
  EXPECT_EQ(hf.config.model_type, "deit");
  hf = parse_hf_config_text(with_field("dtype", "bfloat16"), "config.json");
  EXPECT_EQ(hf.torch_dtype, "bfloat16");
  hf = parse_hf_config_text(with_field("problem_type", "single_label_classification"), "config.json");
  EXPECT_EQ(hf.config.problem_type, ProblemType::single_label);
  EXPECT_TRUE(hf.has_problem_type);
  hf = parse_hf_config_text(R"({"model_type": "vit", "num_labels": 3})", "config.json");
  EXPECT_EQ(hf.config.labels, (std::vector<std::string>{"LABEL_0", "LABEL_1", "LABEL_2"}));
  EXPECT_EQ(hf.config.hidden_size, 768);  // transformers' defaults everywhere else
}

TEST(HfConfig, DuplicateLabelNamesNeedOnlyAgreeingLabel2id) {
  // ImageNet names "crane" twice (ids 134 and 517); Python's label2id keeps one of them.
  std::string text = R"({"model_type": "vit", "id2label": {"0": "crane", "1": "bird", "2": "crane"},
                         "label2id": {"crane": 2, "bird": 1}})";
  HfConfig hf = parse_hf_config_text(text, "config.json");
  EXPECT_EQ(hf.config.labels, (std::vector<std::string>{"crane", "bird", "crane"}));
}

TEST(HfConfig, RefusesMalformedConfigsNamingTheField) {
  expect_config_error(with_field("hidden_size", "768"),
                      "config.json: field \"hidden_size\" must be an integer, got string");
  expect_config_error(with_field("hidden_size", 768.5), "field \"hidden_size\" must be an integer");
  expect_config_error(with_field("qkv_bias", "true"), "field \"qkv_bias\" must be true or false");
  expect_config_error(with_field("layer_norm_eps", "1e-12"), "field \"layer_norm_eps\" must be a number");
  expect_config_error(with_field("hidden_act", "relu"), "\"hidden_act\" must be \"gelu\"");
  expect_config_error(with_field("hidden_act", 3), "field \"hidden_act\" must be a string");
  expect_config_error(with_field("image_size", 225), "\"image_size\" (225) must be a multiple of \"patch_size\" (16)");
  expect_config_error(with_field("num_attention_heads", 7), "must be a multiple of \"num_attention_heads\" (7)");
  expect_config_error(with_field("num_hidden_layers", 0), "\"num_hidden_layers\" must be a positive integer");
  expect_config_error(with_field("model_type", "swin"), "model_type \"swin\" is not supported");
  expect_config_error(with_field("architectures", "ViTModel"), "\"architectures\" must be a list of strings");
  expect_config_error(with_field("problem_type", "regression"), "problem_type \"regression\" is not supported");
  expect_config_error(with_field("num_labels", 7), "\"num_labels\" is 7 but id2label has 5 labels");
  expect_config_error(with_field("id2label", Json{{"0", "a"}, {"2", "c"}}), "id2label key \"2\" is out of range");
  expect_config_error(with_field("id2label", Json{{"0", "a"}, {"01", "b"}}), "id2label key \"01\" is not a label id");
  expect_config_error(with_field("id2label", Json{{"0", "a"}, {"1", 5}}), "id2label[\"1\"] must be a string");
  expect_config_error(with_field("id2label", Json::object()), "field \"id2label\" is empty");
  expect_config_error(with_field("id2label", Json::array({"a", "b"})), "field \"id2label\" must be an object");
  expect_config_error(with_field("label2id", Json{{"tench, Tinca tinca", 1}}),
                      "label2id[\"tench, Tinca tinca\"] = 1 disagrees with id2label (id2label[\"1\"] = \"goldfish");
  expect_config_error(with_field("label2id", Json{{"tench, Tinca tinca", 0}}),
                      "label2id has no entry for label \"goldfish, Carassius auratus\"");
  expect_config_error(with_field("label2id", Json{{"tench, Tinca tinca", 9}}),
                      "disagrees with id2label (which has ids 0..4)");
  expect_config_error("{\"hidden_size\": 768,\n \"patch_size\": }", "config.json: not valid JSON");
  expect_config_error("[1, 2]", "config.json: expected a JSON object");
}

TEST(HfConfig, WritesWhatTransformersWritesAndReadsItBack) {
  ViTConfig config;
  config.hidden_size = 192;
  config.num_attention_heads = 3;
  config.intermediate_size = 768;
  config.image_size = 384;
  config.labels = {"Atelectasis", "Cardiomegaly", "Zebra \xc3\xa9"};
  config.problem_type = ProblemType::multi_label;
  Json extra = {{"_name_or_path", "google/vit-base-patch16-224-in21k"}, {"hidden_size", 1}, {"custom", {1, 2}}};
  std::string text = hf_config_text(config, extra);
  EXPECT_EQ(text.back(), '\n');
  EXPECT_NE(text.find("\"Zebra \\u00e9\""), std::string::npos) << "ASCII-escaped like Python's json.dumps";
  Json json = Json::parse(text);
  EXPECT_EQ(json["architectures"], Json::array({"ViTForImageClassification"}));
  EXPECT_EQ(json["model_type"], "vit");
  EXPECT_EQ(json["torch_dtype"], "float32");
  EXPECT_EQ(json["problem_type"], "multi_label_classification");
  EXPECT_EQ(json["hidden_dropout_prob"], 0.0);
  EXPECT_EQ(json["attention_probs_dropout_prob"], 0.0);
  EXPECT_EQ(json["encoder_stride"], 16);
  EXPECT_EQ(json["id2label"]["2"], "Zebra \xc3\xa9");
  EXPECT_EQ(json["label2id"]["Cardiomegaly"], 1);
  EXPECT_EQ(json["hidden_size"], 192);  // vitpipe's value wins over an extra key of the same name
  EXPECT_EQ(json["_name_or_path"], "google/vit-base-patch16-224-in21k");
  EXPECT_EQ(json["custom"], Json::array({1, 2}));
  EXPECT_TRUE(json.contains("transformers_version"));
  EXPECT_FALSE(json.contains("num_labels"));  // transformers derives it from id2label

  HfConfig back = parse_hf_config_text(text, "written");
  EXPECT_EQ(back.config.labels, config.labels);
  EXPECT_EQ(back.config.hidden_size, 192);
  EXPECT_EQ(back.config.image_size, 384);
  EXPECT_EQ(back.config.problem_type, ProblemType::multi_label);
  EXPECT_EQ(back.extra["custom"], Json::array({1, 2}));

  config.labels.clear();
  EXPECT_THROW(hf_config_text(config), Error);
}

// --- preprocessor_config.json ---

void expect_preprocessor_error(const std::string& text, const std::string& fragment) {
  try {
    parse_preprocessor_config_text(text, "preprocessor_config.json");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "expected: " << fragment << "\n     got: " << e.what();
  }
}

TEST(PreprocessorConfig, ReadsTheOldViTForm) {
  PreprocessorConfig p =
      read_preprocessor_config(fixture("google_vit-base-patch16-224-in21k.preprocessor_config.json"));
  EXPECT_TRUE(p.do_resize);
  EXPECT_EQ(p.height, 224);
  EXPECT_EQ(p.width, 224);
  EXPECT_EQ(p.resample, 2);
  EXPECT_TRUE(p.do_rescale);  // absent: ViTImageProcessor's default
  EXPECT_DOUBLE_EQ(p.rescale_factor, 1.0 / 255.0);
  EXPECT_EQ(p.image_mean, (std::array<double, 3>{0.5, 0.5, 0.5}));
  EXPECT_EQ(p.image_processor_type, "ViTImageProcessor");
  EXPECT_FALSE(p.do_center_crop);
}

TEST(PreprocessorConfig, ReadsDeitWithItsCrop) {
  PreprocessorConfig p = read_preprocessor_config(fixture("facebook_deit-tiny-patch16-224.preprocessor_config.json"));
  EXPECT_EQ(p.height, 256);
  EXPECT_EQ(p.width, 256);
  EXPECT_EQ(p.resample, 3);
  EXPECT_TRUE(p.do_center_crop);
  EXPECT_EQ(p.crop_height, 224);
  EXPECT_EQ(p.image_mean, (std::array<double, 3>{0.485, 0.456, 0.406}));
  EXPECT_EQ(p.image_std, (std::array<double, 3>{0.229, 0.224, 0.225}));
  EXPECT_EQ(p.image_processor_type, "DeiTImageProcessor");
}

TEST(PreprocessorConfig, ReadsTheNewFormsAndBroadcasts) {
  PreprocessorConfig p = parse_preprocessor_config_text(
      R"({"image_processor_type": "ViTImageProcessor", "size": {"height": 384, "width": 320}, "do_rescale": false,
          "rescale_factor": 0.5, "image_mean": [0.25], "image_std": 0.75, "do_normalize": false})",
      "p");
  EXPECT_EQ(p.height, 384);
  EXPECT_EQ(p.width, 320);
  EXPECT_FALSE(p.do_rescale);
  EXPECT_DOUBLE_EQ(p.rescale_factor, 0.5);
  EXPECT_FALSE(p.do_normalize);
  EXPECT_EQ(p.image_mean, (std::array<double, 3>{0.25, 0.25, 0.25}));
  EXPECT_EQ(p.image_std, (std::array<double, 3>{0.75, 0.75, 0.75}));
  p = parse_preprocessor_config_text(R"({"size": {"shortest_edge": 96}})", "p");
  EXPECT_EQ(p.height, 96);
  EXPECT_EQ(p.width, 96);
}

TEST(PreprocessorConfig, DefaultsFollowTheModelsImageSize) {
  PreprocessorConfig p = default_preprocessor_config(384);
  EXPECT_EQ(p.height, 384);
  EXPECT_EQ(p.width, 384);
  EXPECT_EQ(p.image_std, (std::array<double, 3>{0.5, 0.5, 0.5}));
}

TEST(PreprocessorConfig, RefusesMalformedFilesNamingTheField) {
  expect_preprocessor_error(R"({"size": {"longest_edge": 3}})", "field \"size\" must be {\"height\": h, \"width\": w}");
  expect_preprocessor_error(R"({"size": {"height": 3}})", "must give both \"height\" and \"width\"");
  expect_preprocessor_error(R"({"size": -4})", "field \"size\" must be a positive integer");
  expect_preprocessor_error(R"({"size": "224"})", "field \"size\" must be an integer or");
  expect_preprocessor_error(R"({"size": {"height": 2.5, "width": 3}})",
                            "field \"size.height\" must be a positive integer");
  expect_preprocessor_error(R"({"image_mean": [0.5, 0.5]})", "field \"image_mean\" must be 3 numbers");
  expect_preprocessor_error(R"({"image_std": [0.5, "x", 0.5]})", "field \"image_std\" must hold numbers");
  expect_preprocessor_error(R"({"image_std": [0.5, 0.0, 0.5]})", "\"image_std\" must be positive");
  expect_preprocessor_error(R"({"resample": 9})", "field \"resample\" must be a PIL filter id 0..5");
  expect_preprocessor_error(R"({"do_resize": 1})", "field \"do_resize\" must be true or false");
  expect_preprocessor_error(R"({"rescale_factor": 0})", "field \"rescale_factor\" must be a positive number");
  expect_preprocessor_error(R"({"crop_size": []})", "field \"crop_size\" must be an integer or");
  expect_preprocessor_error("{\"size\": 224,", "preprocessor_config.json: not valid JSON");
}

TEST(PreprocessorConfig, WritesTheModernFormAndReadsItBack) {
  PreprocessorConfig p = default_preprocessor_config(96);
  p.image_mean = {0.485, 0.456, 0.406};
  Json json = Json::parse(preprocessor_config_text(p));
  EXPECT_EQ(json["image_processor_type"], "ViTImageProcessor");
  EXPECT_EQ(json["size"], (Json{{"height", 96}, {"width", 96}}));
  EXPECT_EQ(json["image_mean"], Json::array({0.485, 0.456, 0.406}));
  EXPECT_FALSE(json.contains("crop_size"));
  PreprocessorConfig back = parse_preprocessor_config_text(json.dump(), "p");
  EXPECT_EQ(back.height, 96);
  EXPECT_EQ(back.image_mean, p.image_mean);
  EXPECT_DOUBLE_EQ(back.rescale_factor, 1.0 / 255.0);

  PreprocessorConfig deit =
      read_preprocessor_config(fixture("facebook_deit-tiny-patch16-224.preprocessor_config.json"));
  json = Json::parse(preprocessor_config_text(deit));
  EXPECT_EQ(json["image_processor_type"], "DeiTImageProcessor");
  EXPECT_EQ(json["crop_size"], (Json{{"height", 224}, {"width", 224}}));
  back = parse_preprocessor_config_text(json.dump(), "p");
  EXPECT_TRUE(back.do_center_crop);
  EXPECT_EQ(back.height, 256);
}

}  // namespace
}  // namespace vitpipe
