// The whole of `vitpipe explain`: for each image, the findings asked (by name, or its K most probable), each method's
// map as a PNG overlay at the image's resolution and as raw float32 .npy at the patch grid, and DIR/index.json
// listing them (the training report reads it).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "data/image_read_options.h"
#include "explain/attention_maps.h"
#include "io/model_files.h"
#include "util/output_folder.h"

namespace vitpipe {

struct ExplainRequest {
  std::vector<ExplainMethod> methods{ExplainMethod::grad_rollout};
  RolloutOptions rollout;             // for ExplainMethod::rollout
  std::vector<std::string> findings;  // label names; empty: the `top` most probable of each image
  int64_t top = 1;
  std::filesystem::path out_dir;
  // The folder's state under the overwrite rule (util/output_folder.h), checked by the caller before any work:
  // a previous explain output there is replaced, so index.json lists exactly what the folder holds.
  OutputFolder out_folder;
  ImageReadOptions reading;
  Device device = Device::cpu;  // where the forward and backward passes run (backend/device_selection.h)
  bool allow_tf32 = false;
};

struct ExplainedMap {
  std::string image, finding, method;
  double probability = 0;
  std::string overlay, map;  // file names inside out_dir
  int64_t grid_height = 0, grid_width = 0;
};

// `model_name` is only for messages. Throws vitpipe::Error on an unknown finding or an unreadable image.
std::vector<ExplainedMap> explain_images(const LoadedModel& model, const std::string& model_name,
                                         const std::vector<std::string>& images, const ExplainRequest& request);

}  // namespace vitpipe
