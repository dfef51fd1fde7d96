#include "model/flop_count.h"

namespace vitpipe {
namespace {

FlopCount count(const ViTConfig& c, const LoraSettings& lora, bool classifier_token_final_block) {
  const double t = static_cast<double>(c.tokens()), d = static_cast<double>(c.hidden_size);
  const double inner = static_cast<double>(c.intermediate_size), fc1 = static_cast<double>(c.fc1_out());
  const double layers = static_cast<double>(c.num_hidden_layers);
  // One block's linear layers for `rows_qkv` rows of q/k/v and `rows` rows of the rest (LoRA's thin GEMMs too).
  auto block_linear = [&](double rows_qkv, double rows) {
    double f = 2.0 * (rows_qkv * 3 * d * d + rows * (d * d + d * fc1 + inner * d));
    if (lora.enabled()) {
      const double r = static_cast<double>(lora.rank);
      for (LinearSite site : lora.targets) {
        const bool qkv = site == LinearSite::query || site == LinearSite::key || site == LinearSite::value;
        f += 2.0 * (qkv ? rows_qkv : rows) * r *
             static_cast<double>(linear_in_features(c, site) + linear_out_features(c, site));
      }
    }
    return f;
  };
  FlopCount f;
  f.linear += 2.0 * static_cast<double>(c.num_patches()) * static_cast<double>(c.patch_dim()) * d;
  const double full_blocks = classifier_token_final_block ? layers - 1 : layers;
  f.linear += full_blocks * block_linear(t, t);
  f.attention += full_blocks * 2.0 * 2.0 * t * t * d;
  if (classifier_token_final_block) {
    f.linear += block_linear(t, 1);
    f.attention += 2.0 * 2.0 * t * d;
  }
  const double heads = c.head == HeadKind::cls_and_distillation ? 2.0 : 1.0;
  f.linear += heads * 2.0 * static_cast<double>(c.head_features()) * static_cast<double>(c.num_labels());
  return f;
}

}  // namespace

FlopCount forward_flops_per_image(const ViTConfig& c, const LoraSettings& lora) {
  return count(c, lora, c.num_hidden_layers > 0 && c.head_reads_token_zero_only());
}
FlopCount full_model_forward_flops_per_image(const ViTConfig& c, const LoraSettings& lora) {
  return count(c, lora, false);
}

}  // namespace vitpipe
