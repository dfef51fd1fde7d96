// Where a ViT looks, from one image's forward and backward pass through the model:
// - attention rollout (Abnar & Zuidema 2020): heads averaged, half identity for the residual, products of blocks;
// - gradient-weighted rollout (Chefer, Gur & Wolf 2021, "Generic Attention-model Explainability"): per block
//   mean over heads of (dlogit/dA * A) clamped at 0, accumulated as R += A_bar R from R = I;
// - Grad-CAM (Selvaraju et al. 2017) on the last block's tokens at its first LayerNorm (pytorch-grad-cam's ViT
//   recipe, target layer blocks[-1].norm1): channel weights are the gradients averaged over the patch tokens.
// Each returns the relevance of the patch tokens as seen from token 0 (the class token); the patch tokens are the
// last `patches` tokens, after the class token and any register or distillation tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vitpipe {

enum class ExplainMethod { rollout, grad_rollout, gradcam };

ExplainMethod parse_explain_method(const std::string& name);  // "rollout", "grad-rollout", "gradcam"
const char* explain_method_name(ExplainMethod method);

// One block's attention for one image, heads x rows x tokens, row-major. rows = tokens, or 1 for a block whose
// token 0 alone is computed (the final block). grad (same shape) is dlogit/dA; empty where unused.
struct BlockAttention {
  int64_t heads = 0;
  int64_t rows = 0;
  int64_t tokens = 0;
  std::vector<double> probs;
  std::vector<double> grad;
};

// `blocks` in model order; only the last may hold token 0's row alone.
std::vector<double> attention_rollout(const std::vector<BlockAttention>& blocks, int64_t patches);
std::vector<double> gradient_weighted_rollout(const std::vector<BlockAttention>& blocks, int64_t patches);
// activations and gradients: [tokens, dim] row-major.
std::vector<double> grad_cam(const std::vector<double>& activations, const std::vector<double>& gradients,
                             int64_t tokens, int64_t dim, int64_t patches);

}  // namespace vitpipe
