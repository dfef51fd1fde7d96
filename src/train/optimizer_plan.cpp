#include "train/optimizer_plan.h"

#include <algorithm>

#include "util/error.h"

namespace vitpipe {

std::vector<int64_t> update_chunk_bounds(int64_t model_begin, int64_t numel) {
  std::vector<int64_t> bounds = {0};
  int64_t next = (model_begin / kUpdateChunk + 1) * kUpdateChunk - model_begin;
  for (; next < numel; next += kUpdateChunk) bounds.push_back(next);
  if (numel > 0) bounds.push_back(numel);
  return bounds;
}

UpdatePlan::UpdatePlan(const ParameterLayout& layout, int first_segment, int last_segment,
                       const std::vector<double>& lr_scales, bool decay_all, int64_t range_begin, int64_t range_end) {
  VP_REQUIRE(0 <= first_segment && first_segment <= last_segment && last_segment < layout.num_segments(),
             "segment range [", first_segment, ", ", last_segment, "] is outside the model's ", layout.num_segments(),
             " segments");
  VP_REQUIRE(static_cast<int>(lr_scales.size()) == layout.num_segments(), "optimizer: ", lr_scales.size(),
             " learning-rate scales for ", layout.num_segments(), " segments");
  const int64_t begin = range_begin >= 0 ? range_begin : layout.segment_begin(first_segment);
  const int64_t end = range_end >= 0 ? range_end : layout.segment_end(last_segment);
  VP_REQUIRE(layout.segment_begin(first_segment) <= begin && begin <= end && end <= layout.segment_end(last_segment),
             "optimizer: elements [", begin, ", ", end, ") are outside segments [", first_segment, ", ", last_segment,
             "]");
  numel_ = end - begin;
  for (const ParamSpec& spec : layout.specs()) {
    if (spec.segment < first_segment || spec.segment > last_segment) continue;
    if (spec.offset + spec.numel <= begin || spec.offset >= end) continue;  // outside the shard
    params_.push_back({&spec, lr_scales[static_cast<size_t>(spec.segment)], decay_all || spec.decays()});
  }
  const std::vector<int64_t> bounds = update_chunk_bounds(begin, numel_);
  size_t param = 0;
  for (size_t c = 0; c + 1 < bounds.size(); ++c) {
    chunk_first_piece_.push_back(static_cast<int64_t>(pieces_.size()));
    for (int64_t at = bounds[c]; at < bounds[c + 1];) {
      while (params_[param].spec->offset - begin + params_[param].spec->numel <= at) ++param;
      const int64_t piece_end =
          std::min(bounds[c + 1], params_[param].spec->offset - begin + params_[param].spec->numel);
      pieces_.push_back({at, piece_end, static_cast<int32_t>(param)});
      at = piece_end;
    }
  }
  chunk_first_piece_.push_back(static_cast<int64_t>(pieces_.size()));
}

}  // namespace vitpipe
