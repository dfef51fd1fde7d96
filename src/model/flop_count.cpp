#include "model/flop_count.h"

namespace vitpipe {

FlopCount forward_flops_per_image(const ViTConfig& c) {
  const double t = static_cast<double>(c.tokens()), d = static_cast<double>(c.hidden_size);
  const double inner = static_cast<double>(c.intermediate_size);
  FlopCount f;
  f.linear += 2.0 * static_cast<double>(c.num_patches()) * static_cast<double>(c.patch_dim()) * d;
  const double per_block_linear = 2.0 * t * (3 * d * d + d * d + 2 * d * inner);
  const double per_block_attention = 2.0 * 2.0 * t * t * d;
  f.linear += static_cast<double>(c.num_hidden_layers) * per_block_linear;
  f.attention += static_cast<double>(c.num_hidden_layers) * per_block_attention;
  f.linear += 2.0 * d * static_cast<double>(c.num_labels());
  return f;
}

}  // namespace vitpipe
