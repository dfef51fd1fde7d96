#include "explain/model_explainer.h"

#include <cmath>

#include "util/error.h"

namespace vitpipe {
namespace {

std::vector<double> to_double(const Tensor& t) {
  VP_REQUIRE(t.dtype() == DType::f32, "explain: expected fp32 activations");
  return std::vector<double>(t.f32(), t.f32() + t.numel());
}

// dL/dA[h, i, j] = sum_e dL/dO[i, h*hd + e] * V[j, h*hd + e] (O = A V per head); rows = T, or 1 (token 0 only).
std::vector<double> attention_probability_gradient(const Tensor& grad_out, const Tensor& qkv, int64_t heads,
                                                   int64_t rows) {
  const int64_t t = qkv.dim(1), d = qkv.dim(2) / 3, hd = d / heads;
  const float* g = grad_out.f32();
  const float* v = qkv.f32() + 2 * d;
  std::vector<double> out(static_cast<size_t>(heads * rows * t));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < t; ++j) {
        double s = 0;
        const float* gi = g + i * d + h * hd;
        const float* vj = v + j * 3 * d + h * hd;
        for (int64_t e = 0; e < hd; ++e) s += static_cast<double>(gi[e]) * vj[e];
        out[static_cast<size_t>((h * rows + i) * t + j)] = s;
      }
  return out;
}

// The probabilities the forward pass did not keep, materialised from Q, K and the saved log-sum-exp:
// A[h, i, j] = exp(q_i . k_j / sqrt(hd) - lse[h, i]); rows = T, or 1 (token 0 only).
std::vector<double> attention_probabilities(const Tensor& qkv, const Tensor& lse, int64_t heads, int64_t rows) {
  VP_REQUIRE(qkv.dtype() == DType::f32 && lse.dtype() == DType::f32, "explain: expected fp32 activations");
  const int64_t t = qkv.dim(1), d = qkv.dim(2) / 3, hd = d / heads;
  const float* q = qkv.f32();
  const float* k = qkv.f32() + d;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> out(static_cast<size_t>(heads * rows * t));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < rows; ++i) {
      const float* qi = q + i * 3 * d + h * hd;
      const double shift = lse.f32()[h * rows + i];
      for (int64_t j = 0; j < t; ++j) {
        const float* kj = k + j * 3 * d + h * hd;
        double s = 0;
        for (int64_t e = 0; e < hd; ++e) s += static_cast<double>(qi[e]) * kj[e];
        out[static_cast<size_t>((h * rows + i) * t + j)] = std::exp(s * scale - shift);
      }
    }
  return out;
}

}  // namespace

ModelExplainer::ModelExplainer(const LoadedModel& model, Backend& backend) : model_(model) {
  VP_REQUIRE(model.config.num_labels() > 0, model.directory.string(),
             ": the model has no classifier labels to explain");
  VP_REQUIRE(model.config.num_hidden_layers > 0, model.directory.string(), ": the model has no transformer blocks");
  StageOptions options;
  options.training = true;  // the backward pass is the point
  options.max_micro_batch = 1;
  options.slots = 1;
  stage_ = std::make_unique<ViTStage>(model.parameters.layout_ptr(), backend, options);
  stage_->load_values(model.parameters);
  pixels_ = Tensor::zeros(stage_->input(0, 1).shape());
}

float* ModelExplainer::pixels() { return pixels_.f32(); }

Tensor ModelExplainer::on_host(const Tensor& t) const {
  Backend& backend = stage_->backend();
  return backend.host_accessible() ? t : to_host(backend, t);
}

void ModelExplainer::forward() {
  stage_->backend().copy_from_host(pixels_, stage_->input(0, 1));
  stage_->forward(0, 1);
}

std::vector<double> ModelExplainer::probabilities() {
  forward();
  const ViTConfig& c = model_.config;
  const Tensor logits = on_host(stage_->output(0, 1));
  const float* z = logits.f32();
  const int64_t labels = c.num_labels();
  std::vector<double> p(static_cast<size_t>(labels));
  if (c.problem_type == ProblemType::multi_label || labels == 1) {
    for (int64_t l = 0; l < labels; ++l) p[static_cast<size_t>(l)] = 1.0 / (1.0 + std::exp(-static_cast<double>(z[l])));
  } else {
    double max = z[0], sum = 0;
    for (int64_t l = 1; l < labels; ++l) max = std::max(max, static_cast<double>(z[l]));
    for (int64_t l = 0; l < labels; ++l) sum += std::exp(z[l] - max);
    for (int64_t l = 0; l < labels; ++l) p[static_cast<size_t>(l)] = std::exp(z[l] - max) / sum;
  }
  return p;
}

PatchMap ModelExplainer::explain(int64_t label, ExplainMethod method, const RolloutOptions& rollout) {
  const ViTConfig& c = model_.config;
  VP_REQUIRE(label >= 0 && label < c.num_labels(), "explain: label ", label, " outside [0, ", c.num_labels(), ")");
  const int64_t heads = c.num_attention_heads, t = c.tokens(), d = c.hidden_size;
  const int last_block = static_cast<int>(c.num_hidden_layers) - 1;
  std::vector<BlockAttention> blocks(static_cast<size_t>(c.num_hidden_layers));
  std::vector<double> cam_activations, cam_gradients;
  stage_->set_block_gradient_observer([&](const ViTStage::BlockGradients& g) {
    BlockAttention& b = blocks.at(static_cast<size_t>(g.block));
    b.heads = heads;
    b.tokens = t;
    b.rows = g.classifier_token_only ? 1 : t;
    // The saved activations are the backend's memory: host copies of what the maps read.
    const Tensor qkv = on_host(g.saved->qkv).view({1, t, 3 * d});
    b.probs = attention_probabilities(qkv, on_host(g.saved->lse), heads, b.rows);
    if (method == ExplainMethod::grad_rollout) {
      b.grad = attention_probability_gradient(on_host(g.grad_attention), qkv, heads, b.rows);
    }
    if (method == ExplainMethod::gradcam && g.block == last_block) {
      cam_activations = to_double(on_host(g.saved->ln1));
      cam_gradients = to_double(on_host(g.grad_ln1));
    }
  });
  forward();
  Tensor grad = Tensor::zeros({1, c.num_labels()});
  grad.f32()[label] = 1.0f;  // d(logit_label)
  stage_->zero_gradients();
  stage_->set_output_gradient(0, 1, grad);
  stage_->backward(0, 1);
  stage_->set_block_gradient_observer({});

  const int64_t patches = c.num_patches();
  const std::vector<double> readout = readout_weights(c.head, t, patches);
  std::vector<double> map;
  switch (method) {
    case ExplainMethod::rollout:
      map = attention_rollout(blocks, readout, patches, rollout);
      break;
    case ExplainMethod::grad_rollout:
      map = gradient_weighted_rollout(blocks, readout, patches);
      break;
    case ExplainMethod::gradcam:
      map = grad_cam(cam_activations, cam_gradients, t, d, patches);
      break;
  }
  PatchMap out;
  out.grid_height = out.grid_width = c.grid();
  out.values.assign(map.begin(), map.end());
  return out;
}

}  // namespace vitpipe
