// preprocessor_config.json of a ViTImageProcessor: how a checkpoint expects its pixels.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>

namespace vitpipe {

struct PreprocessorConfig {
  bool do_resize = true;
  int64_t height = 224;  // `size` is an int in old files, {"height": h, "width": w} in new ones
  int64_t width = 224;
  int resample = 2;  // PIL filter id: 0 nearest, 1 lanczos, 2 bilinear, 3 bicubic, 4 box, 5 hamming
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<double, 3> image_mean{0.5, 0.5, 0.5};
  std::array<double, 3> image_std{0.5, 0.5, 0.5};
  std::string image_processor_type = "ViTImageProcessor";
};

}  // namespace vitpipe
