// Training augmentation on uint8 images, fused into one pass that writes the normalised float CHW sample:
// random resized crop + small rotation (+ optional horizontal flip) as one affine warp with fixed-point bilinear
// sampling (edges replicated), then brightness/contrast jitter and the model's normalisation as one 256-entry table
// per channel. Fast, deterministic, not Pillow-exact (evaluation never augments; it uses ImageProcessor).
//
// Every random number comes from Rng({seed, epoch, sample index}), drawn in a fixed order whatever is enabled, so
// a sample's pixels depend on nothing else: not threads, processes, batch layout, nor which other flags are on.
#pragma once

#include <array>
#include <cstdint>

#include "data/dataset.h"
#include "io/preprocessor_config.h"

namespace vitpipe {

struct AugmentationSettings {
  bool random_resized_crop = true;
  double crop_scale_min = 0.7;  // share of the image area a crop covers
  double crop_scale_max = 1.0;
  double crop_ratio_min = 3.0 / 4.0;  // crop width / height
  double crop_ratio_max = 4.0 / 3.0;
  bool rotation = true;
  double max_rotation_degrees = 7.0;  // uniform in [-max, max]
  bool color_jitter = true;
  double brightness = 0.1;       // factor uniform in [1 - b, 1 + b]
  double contrast = 0.1;         // factor uniform in [1 - c, 1 + c], around the image's mean
  bool horizontal_flip = false;  // off: chest anatomy is not left-right symmetric
};

// The random parameters of one sample.
struct AugmentationDraw {
  double crop_x = 0, crop_y = 0, crop_width = 0, crop_height = 0;  // in source pixels (continuous)
  double angle_radians = 0;
  bool flip = false;
  double brightness = 1, contrast = 1;
};

AugmentationDraw draw_augmentation(const AugmentationSettings& settings, int64_t source_width, int64_t source_height,
                                   uint64_t seed, int64_t epoch, int64_t sample_index);

// value -> normalised float, per channel (ImageProcessor's table: the same numbers evaluation produces).
using NormalizationTable = std::array<std::array<float, 256>, 3>;
NormalizationTable normalization_table(const PreprocessorConfig& config);

// Writes 3 * out_size * out_size floats (channel-major) for `source` (1 or 3 channels).
void augment_to_chw(const StoredImage& source, const AugmentationDraw& draw, const NormalizationTable& table,
                    int64_t out_size, float* out_chw);

// The plain scalar code of augment_to_chw (which may take a vector path): the same integers, for tests.
void augment_to_chw_reference(const StoredImage& source, const AugmentationDraw& draw, const NormalizationTable& table,
                              int64_t out_size, float* out_chw);

// No augmentation, same size: the table applied to every pixel (what ImageProcessor does for an S x S input).
void normalize_to_chw(const StoredImage& source, const NormalizationTable& table, float* out_chw);

}  // namespace vitpipe
