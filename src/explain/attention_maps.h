// Where a ViT looks, from one image's forward and backward pass through the model:
// - attention rollout (Abnar & Zuidema 2020): heads fused (averaged by default), half identity for the residual,
//   products of blocks; optionally the weakest attentions of each row dropped first (jacobgil/vit-explain's
//   head_fusion and discard_ratio, see RolloutOptions);
// - gradient-weighted rollout (Chefer, Gur & Wolf 2021, "Generic Attention-model Explainability"): per block
//   mean over heads of (dlogit/dA * A) clamped at 0, accumulated as R += A_bar R from R = I;
// - Grad-CAM (Selvaraju et al. 2017) on the last block's tokens at its first LayerNorm (pytorch-grad-cam's ViT
//   recipe, target layer blocks[-1].norm1): channel weights are the gradients averaged over the patch tokens.
// Each returns the relevance of the patch tokens as seen from the tokens the classifier reads (`readout`: the class
// token for ViT, the class and distillation tokens averaged for DeiT with its teacher head, the class token and the
// patch mean for DINOv2, as their heads weigh them); the patch tokens are the last `patches` tokens, after the class
// token and any register or distillation tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/vit_config.h"

namespace vitpipe {

enum class ExplainMethod { rollout, grad_rollout, gradcam };

ExplainMethod parse_explain_method(const std::string& name);  // "rollout", "grad-rollout", "gradcam"
const char* explain_method_name(ExplainMethod method);

// How attention rollout fuses a block's heads: their mean (Abnar & Zuidema), or the elementwise max or min
// (vit-explain's head_fusion).
enum class HeadFusion { mean, max, min };
HeadFusion parse_head_fusion(const std::string& name);  // "mean", "max", "min"
const char* head_fusion_name(HeadFusion fusion);

struct RolloutOptions {
  HeadFusion head_fusion = HeadFusion::mean;
  // In [0, 1): this fraction of each fused row's smallest entries set to 0 before the identity is added, the
  // attention to the class token kept (vit-explain's discard_ratio, applied per row rather than over the whole
  // matrix: the final block's attention is computed for the class token's row alone).
  double discard_ratio = 0.9;
};
void check_rollout_options(const RolloutOptions& options);  // one line naming --discard-ratio when outside [0, 1)

// One block's attention for one image, heads x rows x tokens, row-major. rows = tokens, or 1 for a block whose
// token 0 alone is computed (the final block). grad (same shape) is dlogit/dA; empty where unused.
struct BlockAttention {
  int64_t heads = 0;
  int64_t rows = 0;
  int64_t tokens = 0;
  std::vector<double> probs;
  std::vector<double> grad;
};

// `blocks` in model order; only the last may hold token 0's row alone (then `readout` must be token 0).
// `readout`: a weight per token, summing to 1 (readout_weights).
std::vector<double> attention_rollout(const std::vector<BlockAttention>& blocks, const std::vector<double>& readout,
                                      int64_t patches, const RolloutOptions& options = {});
std::vector<double> gradient_weighted_rollout(const std::vector<BlockAttention>& blocks,
                                              const std::vector<double>& readout, int64_t patches);
// The weight of each of `tokens` tokens in what the head reads: token 0 (cls_token); tokens 0 and 1, half each
// (cls_and_distillation); token 0 half and the `patches` patch tokens the other half (cls_and_patch_mean).
std::vector<double> readout_weights(HeadKind head, int64_t tokens, int64_t patches);
// activations and gradients: [tokens, dim] row-major.
std::vector<double> grad_cam(const std::vector<double>& activations, const std::vector<double>& gradients,
                             int64_t tokens, int64_t dim, int64_t patches);

}  // namespace vitpipe
