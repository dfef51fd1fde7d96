// config.json and preprocessor_config.json of the other families: DINOv2 (RAD-DINO), DINOv2 with registers, DeiT;
// BitImageProcessor's shortest-edge resize and the centre crop; the refusals the issue names.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "data/image_processor.h"
#include "io/hf_config.h"
#include "io/preprocessor_config.h"
#include "io/preprocessor_presets.h"
#include "model/parameter_layout.h"
#include "model/presets.h"
#include "util/error.h"

namespace vitpipe {
namespace {

using Json = nlohmann::json;

// microsoft/rad-dino's config.json as published (a Dinov2Model: no labels).
const char* kRadDino = R"({
  "architectures": ["Dinov2Model"], "attention_probs_dropout_prob": 0.0, "drop_path_rate": 0.0,
  "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "hidden_size": 768, "image_size": 518,
  "initializer_range": 0.02, "layer_norm_eps": 1e-06, "layerscale_value": 1.0, "mlp_ratio": 4,
  "model_type": "dinov2", "num_attention_heads": 12, "num_channels": 3, "num_hidden_layers": 12,
  "patch_size": 14, "qkv_bias": true, "torch_dtype": "float32", "transformers_version": "4.36.2",
  "use_swiglu_ffn": false})";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(FamilyConfig, ReadsRadDinoAsDinov2) {
  const ViTConfig c = parse_hf_config_text(kRadDino, "config.json").config;
  EXPECT_EQ(c.model_type, "dinov2");
  EXPECT_TRUE(c.layer_scale);
  EXPECT_TRUE(c.mask_token);  // use_mask_token defaults to true
  EXPECT_FALSE(c.swiglu);
  EXPECT_EQ(c.intermediate_size, 3072);  // int(768 * 4)
  EXPECT_EQ(c.head, HeadKind::cls_and_patch_mean);
  EXPECT_EQ(c.position_interpolation, PositionInterpolation::bicubic);
  EXPECT_EQ(c.tokens(), 1 + 37 * 37);  // 1,370 tokens at 518 px, patch 14
  EXPECT_DOUBLE_EQ(c.layer_norm_eps, 1e-6);
  const ParameterLayout layout(c);
  EXPECT_NE(layout.find("dinov2.encoder.layer.11.layer_scale2.lambda1"), nullptr);
  EXPECT_NE(layout.find("dinov2.embeddings.mask_token"), nullptr);
  EXPECT_EQ(layout.find("classifier.weight")->shape, (Shape{2, 2 * 768}));  // LABEL_0, LABEL_1 until fine-tuned
}

TEST(FamilyConfig, Dinov2DefaultsAreTheCurrentClasss) {
  // Dinov2Config today: layer_norm_eps 1e-6, patch 14, mlp_ratio 4; SwiGLU: (int(4D * 2 / 3) + 7) // 8 * 8.
  ViTConfig c = parse_hf_config_text(R"({"model_type": "dinov2", "hidden_size": 1536, "num_attention_heads": 24,
                                         "use_swiglu_ffn": true, "num_labels": 2})",
                                     "config.json")
                    .config;
  EXPECT_DOUBLE_EQ(c.layer_norm_eps, 1e-6);
  EXPECT_EQ(c.patch_size, 14);
  EXPECT_EQ(c.intermediate_size, 4096);  // DINOv2 giant's weights_out [1536, 4096]
  EXPECT_EQ(c.fc1_out(), 8192);
  c = parse_hf_config_text(R"({"model_type": "dinov2", "hidden_size": 64, "num_attention_heads": 4,
                               "use_swiglu_ffn": true, "mlp_ratio": 4, "num_labels": 2})",
                           "config.json")
          .config;
  EXPECT_EQ(c.intermediate_size, 176);  // int(256 * 2 / 3) = 170 -> 176
  c = parse_hf_config_text(R"({"model_type": "dinov2", "use_mask_token": false, "num_labels": 1})", "c").config;
  EXPECT_FALSE(c.mask_token);
}

TEST(FamilyConfig, ReadsRegistersAndDeitArchitectures) {
  ViTConfig c = parse_hf_config_text(R"({"model_type": "dinov2_with_registers", "num_register_tokens": 4,
                                         "architectures": ["Dinov2WithRegistersForImageClassification"],
                                         "num_labels": 3})",
                                     "config.json")
                    .config;
  EXPECT_EQ(c.num_register_tokens, 4);
  EXPECT_TRUE(c.mask_token);
  EXPECT_EQ(c.prefix_tokens(), 5);
  EXPECT_EQ(c.positioned_prefix(), 1);
  EXPECT_EQ(c.position_interpolation, PositionInterpolation::bicubic_antialias);
  EXPECT_EQ(c.patch_size, 16);  // Dinov2WithRegistersConfig's default
  c = parse_hf_config_text(R"({"model_type": "deit", "architectures": ["DeiTForImageClassification"],
                               "num_labels": 3})",
                           "config.json")
          .config;
  EXPECT_TRUE(c.distillation_token);
  EXPECT_EQ(c.head, HeadKind::cls_token);
  EXPECT_EQ(c.position_rows(), 2 + 14 * 14);
}

TEST(FamilyConfig, WritesWhatTheFamilysSavePretrainedWrites) {
  ViTConfig c = parse_hf_config_text(kRadDino, "config.json").config;
  c.labels = {"Effusion", "Mass"};
  Json j = hf_config_to_json(c);
  EXPECT_EQ(j["model_type"], "dinov2");
  EXPECT_EQ(j["architectures"], Json::array({"Dinov2ForImageClassification"}));
  EXPECT_EQ(j["mlp_ratio"], 4);
  EXPECT_TRUE(j["mlp_ratio"].is_number_integer());
  EXPECT_EQ(j["use_mask_token"], true);
  EXPECT_EQ(j["image_size"], 518);  // the position grid stays the checkpoint's
  EXPECT_FALSE(j.contains("intermediate_size"));
  const ViTConfig back = parse_hf_config(j, "written").config;
  EXPECT_EQ(back.intermediate_size, c.intermediate_size);
  EXPECT_EQ(back.labels, c.labels);
  c.model_type = "deit";
  c = parse_hf_config_text(R"({"model_type": "deit", "architectures": ["DeiTForImageClassificationWithTeacher"],
                               "num_labels": 2})",
                           "c")
          .config;
  EXPECT_EQ(hf_config_to_json(c)["architectures"], Json::array({"DeiTForImageClassificationWithTeacher"}));
}

TEST(FamilyConfig, UnknownModelTypeNamesTheSupportedOnes) {
  const std::string message = error_of([] { parse_hf_config_text(R"({"model_type": "beit"})", "config.json"); });
  EXPECT_NE(message.find("model_type \"beit\" is not supported"), std::string::npos) << message;
  for (const char* name : {"\"vit\"", "\"deit\"", "\"dinov2\"", "\"dinov2_with_registers\""}) {
    EXPECT_NE(message.find(name), std::string::npos) << message;
  }
}

TEST(BitImageProcessor, ReadsRadDinosProcessorAndResizesTheShortestEdge) {
  const PreprocessorConfig p = parse_preprocessor_config_text(R"({
    "crop_size": {"height": 518, "width": 518}, "do_center_crop": true, "do_convert_rgb": true,
    "do_normalize": true, "do_rescale": true, "do_resize": true, "image_mean": [0.5307, 0.5307, 0.5307],
    "image_processor_type": "BitImageProcessor", "image_std": [0.2583, 0.2583, 0.2583], "resample": 3,
    "rescale_factor": 0.00392156862745098, "size": {"shortest_edge": 518}})",
                                                              "preprocessor_config.json");
  EXPECT_EQ(p.resize_mode, ResizeMode::shortest_edge);
  EXPECT_EQ(p.shortest_edge, 518);
  EXPECT_TRUE(p.do_center_crop);
  EXPECT_EQ(p.fixed_output_size(), (std::pair<int64_t, int64_t>{518, 518}));
  // int(518 * long / short): 2500 x 2048 (w x h) -> 632 x 518; 1024 x 1024 -> 518 x 518; portrait the other way.
  EXPECT_EQ(p.resized_size(2500, 2048), (std::pair<int64_t, int64_t>{632, 518}));
  EXPECT_EQ(p.resized_size(1024, 1024), (std::pair<int64_t, int64_t>{518, 518}));
  EXPECT_EQ(p.resized_size(2048, 2500), (std::pair<int64_t, int64_t>{518, 632}));
  // BitImageProcessor's own defaults: shortest edge 224, crop 224, bicubic, OpenAI CLIP statistics.
  const PreprocessorConfig d = parse_preprocessor_config_text(R"({"image_processor_type": "BitImageProcessor"})", "p");
  EXPECT_EQ(d.shortest_edge, 224);
  EXPECT_EQ(d.resample, 3);
  EXPECT_DOUBLE_EQ(d.image_mean[0], 0.48145466);
  // An int size is a shortest edge for Bit, a square for ViT.
  EXPECT_EQ(parse_preprocessor_config_text(R"({"image_processor_type": "BitImageProcessor", "size": 64,
                                                "crop_size": 64})",
                                           "p")
                .resize_mode,
            ResizeMode::shortest_edge);
  // Written back as Bit with {"shortest_edge"}, and read back the same.
  const Json j = Json::parse(preprocessor_config_text(p));
  EXPECT_EQ(j["image_processor_type"], "BitImageProcessor");
  EXPECT_EQ(j["size"], (Json{{"shortest_edge", 518}}));
  EXPECT_EQ(parse_preprocessor_config_text(j.dump(), "back").geometry(), p.geometry());
}

TEST(BitImageProcessor, RefusesACropLargerThanTheResize) {
  std::string message = error_of([] {
    parse_preprocessor_config_text(R"({"image_processor_type": "BitImageProcessor", "size": {"shortest_edge": 256},
                                       "crop_size": {"height": 300, "width": 300}})",
                                   "preprocessor_config.json");
  });
  EXPECT_NE(message.find("preprocessor_config.json: \"crop_size\" 300x300 is larger than the resize"),
            std::string::npos)
      << message;
  message = error_of([] {
    parse_preprocessor_config_text(R"({"feature_extractor_type": "DeiTFeatureExtractor", "size": 200,
                                       "crop_size": 224, "do_center_crop": true})",
                                   "preprocessor_config.json");
  });
  EXPECT_NE(message.find("\"crop_size\" 224x224 is larger than the resize to 200x200"), std::string::npos) << message;
}

TEST(CenterCrop, TakesTransformersOffsetsAndPadsWithZeros) {
  // 5 x 4 (w x h) image of values y * 10 + x; crop 3 x 2: top = (4 - 2) // 2 = 1, left = (5 - 3) // 2 = 1.
  std::vector<uint8_t> image(20);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 5; ++x) image[static_cast<size_t>(y * 5 + x)] = static_cast<uint8_t>(y * 10 + x);
  std::vector<uint8_t> out(6);
  center_crop_pixels(image.data(), 5, 4, 1, 3, 2, out.data());
  EXPECT_EQ(out, (std::vector<uint8_t>{11, 12, 13, 21, 22, 23}));
  // Larger than the image: centred on zeros, top_pad = ceil((6 - 4) / 2) = 1, left_pad = ceil((6 - 5) / 2) = 1.
  out.assign(36, 99);
  center_crop_pixels(image.data(), 5, 4, 1, 6, 6, out.data());
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[1 * 6 + 1], 0);   // image (0, 0) lands at (1, 1), value 0
  EXPECT_EQ(out[1 * 6 + 2], 1);   // image (0, 1)
  EXPECT_EQ(out[4 * 6 + 5], 34);  // image (3, 4)
  EXPECT_EQ(out[5 * 6 + 3], 0);   // below the image
}

TEST(Presets, Dinov2PresetsAreTheReleasedShapes) {
  const ViTConfig rad = preset_config("rad-dino");
  EXPECT_EQ(rad.tokens(), 1370);
  EXPECT_FALSE(rad.resamples_positions());
  const ViTConfig base = preset_config("dinov2-base");
  EXPECT_EQ(base.position_grid(), 37);
  EXPECT_EQ(base.grid(), 16);  // fed at 224: positions interpolated per pass
  const PreprocessorConfig pre = preset_preprocessor("dinov2-base");
  EXPECT_EQ(pre.shortest_edge, 256);
  EXPECT_EQ(pre.crop_height, 224);
  EXPECT_EQ(preset_preprocessor("rad-dino").geometry(), "resize shortest edge 518 resample 3, crop 518x518");
}

}  // namespace
}  // namespace vitpipe
