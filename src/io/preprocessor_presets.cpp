#include "io/preprocessor_presets.h"

#include "model/presets.h"

namespace vitpipe {

PreprocessorConfig preset_preprocessor(const std::string& name) {
  const ViTConfig config = preset_config(name);
  if (!config.dinov2_family()) return default_preprocessor_config(config.image_size);
  PreprocessorConfig pre;  // BitImageProcessor: shortest edge, bicubic, centre crop
  pre.image_processor_type = "BitImageProcessor";
  pre.resize_mode = ResizeMode::shortest_edge;
  pre.resample = 3;
  pre.do_center_crop = true;
  if (name == "rad-dino") {
    pre.shortest_edge = 518;
    pre.crop_height = pre.crop_width = 518;
    pre.image_mean = {0.5307, 0.5307, 0.5307};
    pre.image_std = {0.2583, 0.2583, 0.2583};
  } else {
    // facebook/dinov2-*: shortest edge 256, crop 224 (the same ratio for the test-sized dinov2-micro: 32 -> 28).
    pre.crop_height = pre.crop_width = config.input_size();
    pre.shortest_edge = config.input_size() * 256 / 224;
    pre.image_mean = {0.485, 0.456, 0.406};
    pre.image_std = {0.229, 0.224, 0.225};
  }
  return pre;
}

}  // namespace vitpipe
