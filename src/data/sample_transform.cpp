#include "data/sample_transform.h"

#include <algorithm>

#include "data/pillow_resize.h"
#include "util/error.h"

namespace vitpipe {

void check_cache_matches_model(const Dataset& dataset, const PreprocessorConfig& config) {
  const ImageReadOptions wanted_reading = image_read_options_of(config, "preprocessor config");
  const ImageReadOptions& have = dataset.image_read_options();
  VP_REQUIRE(have == wanted_reading, dataset.spec(), " reads images with ", describe_image_read_options(have),
             ", but the model's preprocessor config asks for ", describe_image_read_options(wanted_reading),
             dataset.stored_image_size() > 0 ? "; run `vitpipe data prepare` with those options for this model"
                                             : "; pass the same --intensity / --dicom-window");
  const std::string stored = dataset.stored_geometry();
  if (stored.empty()) return;
  const std::string wanted = config.geometry();
  VP_REQUIRE(stored == wanted, dataset.spec(), " holds images prepared with \"", stored, "\", but the model's ",
             "preprocessing is \"", wanted,
             "\": run `vitpipe data prepare --model MODEL` (or --image-size/--resample) ", "for this model");
}

SampleTransform::SampleTransform(std::shared_ptr<const Dataset> dataset, const PreprocessorConfig& config, bool augment,
                                 const AugmentationSettings& augmentation, uint64_t seed)
    : dataset_(std::move(dataset)),
      processor_(config),
      table_(normalization_table(config)),
      augment_(augment),
      augmentation_(augmentation),
      seed_(seed),
      height_(config.fixed_output_size().second),
      width_(config.fixed_output_size().first) {
  check_cache_matches_model(*dataset_, config);
  if (augment_) {
    VP_REQUIRE(height_ > 0, "augmentation needs a preprocessing with a fixed output size (a resize to height x width ",
               "or a centre crop)");
    VP_REQUIRE(height_ == width_, "augmentation supports square inputs only, the model expects ", width_, "x", height_);
  }
}

void SampleTransform::apply(int64_t item, int64_t epoch, float* out) const {
  StoredImage view;
  const bool stored = dataset_->stored(item, &view);
  if (!augment_) {
    if (stored) {
      normalize_to_chw(view, table_, out);  // already S x S: Pillow's resize would be the identity
    } else {
      processor_.process(dataset_->load_decoded(item), out);
    }
    return;
  }
  std::vector<uint8_t> resized;  // the pixels the cache would hold (plus padding for the vector code)
  if (!stored) {
    DecodedImage decoded = dataset_->load_decoded(item);
    int64_t w = 0, h = 0;
    processor_.geometry(decoded.pixels.data(), decoded.width, decoded.height, decoded.channels, &resized, &w, &h, 64);
    view.pixels = resized.data();
    view.width = w;
    view.height = h;
    view.channels = decoded.channels;
    view.padded = true;
  }
  const AugmentationDraw draw = draw_augmentation(augmentation_, view.width, view.height, seed_, epoch, item);
  augment_to_chw(view, draw, table_, height_, out);
}

}  // namespace vitpipe
