// One dataset item -> the model's input: 3 x S x S normalised floats.
//   evaluation: exactly the model's image processor (ImageProcessor: Pillow resize, centre crop, rescale,
//               normalise), as `predict` does; a cache already holds the resized and cropped pixels and only needs
//               the normalisation table, which is the same thing bit for bit.
//   training:   the image at S x S (the cache's pixels, or decode + the processor's resize and crop: the very pixels
//               the cache stores), then the fused augmentation. So cache and files give identical batches.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/augmentation.h"
#include "data/dataset.h"
#include "data/image_processor.h"
#include "io/preprocessor_config.h"

namespace vitpipe {

class SampleTransform {
 public:
  // Throws when a cache was prepared with another resize or crop than `config` asks (a cache for another model).
  SampleTransform(std::shared_ptr<const Dataset> dataset, const PreprocessorConfig& config, bool augment,
                  const AugmentationSettings& augmentation, uint64_t seed);

  int64_t image_height() const { return height_; }
  int64_t image_width() const { return width_; }
  int64_t sample_floats() const { return 3 * height_ * width_; }

  // Writes sample_floats() floats. Throws (naming the file) when the image cannot be read.
  void apply(int64_t item, int64_t epoch, float* out_chw) const;

 private:
  std::shared_ptr<const Dataset> dataset_;
  ImageProcessor processor_;
  NormalizationTable table_;
  bool augment_;
  AugmentationSettings augmentation_;
  uint64_t seed_;
  int64_t height_, width_;
};

// Fails with a message when `dataset` is a cache whose images were prepared with another resize or crop than
// `config`'s, or reads image files otherwise than the config's "vitpipe_intensity" says.
void check_cache_matches_model(const Dataset& dataset, const PreprocessorConfig& config);

}  // namespace vitpipe
