#include "model/flop_count.h"

namespace vitpipe {
namespace {

FlopCount count(const ViTConfig& c, bool classifier_token_final_block) {
  const double t = static_cast<double>(c.tokens()), d = static_cast<double>(c.hidden_size);
  const double inner = static_cast<double>(c.intermediate_size);
  const double layers = static_cast<double>(c.num_hidden_layers);
  FlopCount f;
  f.linear += 2.0 * static_cast<double>(c.num_patches()) * static_cast<double>(c.patch_dim()) * d;
  const double full_blocks = classifier_token_final_block ? layers - 1 : layers;
  f.linear += full_blocks * 2.0 * t * (3 * d * d + d * d + 2 * d * inner);
  f.attention += full_blocks * 2.0 * 2.0 * t * t * d;
  if (classifier_token_final_block) {
    f.linear += 2.0 * (t * 3 * d * d + d * d + 2 * d * inner);
    f.attention += 2.0 * 2.0 * t * d;
  }
  f.linear += 2.0 * d * static_cast<double>(c.num_labels());
  return f;
}

}  // namespace

FlopCount forward_flops_per_image(const ViTConfig& c) { return count(c, c.num_hidden_layers > 0); }
FlopCount full_model_forward_flops_per_image(const ViTConfig& c) { return count(c, false); }

}  // namespace vitpipe
