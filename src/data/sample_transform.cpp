#include "data/sample_transform.h"

#include <algorithm>

#include "data/pillow_resize.h"
#include "util/error.h"

namespace vitpipe {

void check_cache_matches_model(const Dataset& dataset, const PreprocessorConfig& config) {
  const ImageReadOptions wanted = image_read_options_of(config, "preprocessor config");
  const ImageReadOptions& have = dataset.image_read_options();
  VP_REQUIRE(have == wanted, dataset.spec(), " reads images with ", describe_image_read_options(have),
             ", but the model's preprocessor config asks for ", describe_image_read_options(wanted),
             dataset.stored_image_size() > 0 ? "; run `vitpipe data prepare` with those options for this model"
                                             : "; pass the same --intensity / --dicom-window");
  const int64_t stored = dataset.stored_image_size();
  if (stored <= 0) return;
  const bool size_ok = !config.do_resize || (config.height == stored && config.width == stored);
  const bool resample_ok = !config.do_resize || dataset.stored_resample() == config.resample;
  VP_REQUIRE(size_ok && resample_ok, dataset.spec(), " holds ", stored, "x", stored, " images resized with resample ",
             dataset.stored_resample(), ", but the model expects ", config.height, "x", config.width, " with resample ",
             config.resample, ": run `vitpipe data prepare --image-size ", config.height, " --resample ",
             config.resample, "` for this model");
}

SampleTransform::SampleTransform(std::shared_ptr<const Dataset> dataset, const PreprocessorConfig& config, bool augment,
                                 const AugmentationSettings& augmentation, uint64_t seed)
    : dataset_(std::move(dataset)),
      processor_(config),
      table_(normalization_table(config)),
      augment_(augment),
      augmentation_(augmentation),
      seed_(seed),
      height_(config.height),
      width_(config.width) {
  check_cache_matches_model(*dataset_, config);
  if (augment_) {
    VP_REQUIRE(config.do_resize, "augmentation needs a preprocessor config with do_resize (a fixed input size)");
    VP_REQUIRE(config.height == config.width, "augmentation supports square inputs only, the model expects ",
               config.height, "x", config.width);
  }
}

void SampleTransform::apply(int64_t item, int64_t epoch, float* out) const {
  StoredImage view;
  const bool stored = dataset_->stored(item, &view);
  const PreprocessorConfig& config = processor_.config();
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
    const auto bytes = static_cast<size_t>(width_ * height_ * decoded.channels);
    resized.resize(bytes + 64);
    if (decoded.width == width_ && decoded.height == height_) {
      std::copy_n(decoded.pixels.data(), bytes, resized.data());
    } else {
      resize_like_pillow(decoded.pixels.data(), decoded.width, decoded.height, decoded.channels, resized.data(), width_,
                         height_, resample_filter_from_pil(config.resample));
    }
    view.pixels = resized.data();
    view.width = width_;
    view.height = height_;
    view.channels = decoded.channels;
    view.padded = true;
  }
  const AugmentationDraw draw = draw_augmentation(augmentation_, view.width, view.height, seed_, epoch, item);
  augment_to_chw(view, draw, table_, height_, out);
}

}  // namespace vitpipe
