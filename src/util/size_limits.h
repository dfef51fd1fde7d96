// Sizes a hostile or broken file may claim, refused before anything is allocated for them. A limit a real dataset
// or model could need to exceed can be raised with the environment variable named in its message.
#pragma once

#include <cstdint>

namespace vitpipe {

// VITPIPE_MAX_IMAGE_PIXELS: width x height of one decoded image (default 2^28 = 268,435,456, a 16384 x 16384 image).
int64_t max_image_pixels();
// VITPIPE_MAX_CSV_LINE_BYTES: one record of a label CSV or one line of a split list (default 1 MiB).
int64_t max_csv_line_bytes();
// VITPIPE_MAX_PARAMETERS: parameters a config.json may describe (default 2 x 10^10, about ViT-22B's).
int64_t max_model_parameters();

// The positive integer in environment variable `name`, or `default_value` when it is unset or empty. Throws
// vitpipe::Error naming the variable when it holds anything else.
int64_t size_limit_from_environment(const char* name, int64_t default_value);

}  // namespace vitpipe
