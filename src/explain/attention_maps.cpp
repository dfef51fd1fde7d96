#include "explain/attention_maps.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace vitpipe {

ExplainMethod parse_explain_method(const std::string& name) {
  if (name == "rollout") return ExplainMethod::rollout;
  if (name == "grad-rollout") return ExplainMethod::grad_rollout;
  if (name == "gradcam") return ExplainMethod::gradcam;
  fail("--method: unknown value '", name, "' (expected one of: rollout, grad-rollout, gradcam)");
}

const char* explain_method_name(ExplainMethod method) {
  switch (method) {
    case ExplainMethod::rollout:
      return "rollout";
    case ExplainMethod::grad_rollout:
      return "grad-rollout";
    case ExplainMethod::gradcam:
      return "gradcam";
  }
  return "?";
}

HeadFusion parse_head_fusion(const std::string& name) {
  if (name == "mean") return HeadFusion::mean;
  if (name == "max") return HeadFusion::max;
  if (name == "min") return HeadFusion::min;
  fail("--head-fusion: unknown value '", name, "' (expected one of: mean, max, min)");
}

const char* head_fusion_name(HeadFusion fusion) {
  switch (fusion) {
    case HeadFusion::mean:
      return "mean";
    case HeadFusion::max:
      return "max";
    case HeadFusion::min:
      return "min";
  }
  return "?";
}

void check_rollout_options(const RolloutOptions& options) {
  VP_REQUIRE(std::isfinite(options.discard_ratio) && options.discard_ratio >= 0.0 && options.discard_ratio < 1.0,
             "--discard-ratio must be in [0, 1) (got ", options.discard_ratio, ")");
}

namespace {

void check_blocks(const std::vector<BlockAttention>& blocks, int64_t patches, bool need_grad) {
  VP_REQUIRE(!blocks.empty(), "explain: the model has no attention blocks");
  const int64_t t = blocks.front().tokens;
  VP_REQUIRE(patches > 0 && patches < t, "explain: ", patches, " patch tokens of ", t);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockAttention& b = blocks[i];
    const bool last = i + 1 == blocks.size();
    VP_REQUIRE(b.tokens == t && (b.rows == t || (last && b.rows == 1)), "explain: block ", i, " has ", b.rows, "x",
               b.tokens, " attention rows, expected ", t, "x", t);
    const size_t n = static_cast<size_t>(b.heads * b.rows * b.tokens);
    VP_REQUIRE(b.probs.size() == n && (!need_grad || b.grad.size() == n), "explain: block ", i,
               " attention size mismatch");
  }
}

// The head-averaged matrix row `row` of block b after `transform(a, g)` on each element: [tokens].
template <class Transform>
std::vector<double> fused_row(const BlockAttention& b, int64_t row, Transform transform) {
  std::vector<double> out(static_cast<size_t>(b.tokens), 0.0);
  for (int64_t h = 0; h < b.heads; ++h) {
    const size_t base = static_cast<size_t>((h * b.rows + row) * b.tokens);
    for (int64_t j = 0; j < b.tokens; ++j) {
      const size_t k = base + static_cast<size_t>(j);
      out[static_cast<size_t>(j)] += transform(b.probs[k], b.grad.empty() ? 0.0 : b.grad[k]);
    }
  }
  for (double& v : out) v /= static_cast<double>(b.heads);
  return out;
}

// Row `row` of block b with its heads fused as `fusion` says: [tokens].
std::vector<double> head_fused_row(const BlockAttention& b, int64_t row, HeadFusion fusion) {
  if (fusion == HeadFusion::mean) return fused_row(b, row, [](double a, double) { return a; });
  std::vector<double> out(static_cast<size_t>(b.tokens));
  for (int64_t j = 0; j < b.tokens; ++j) {
    double v = b.probs[static_cast<size_t>(row * b.tokens + j)];
    for (int64_t h = 1; h < b.heads; ++h) {
      const double a = b.probs[static_cast<size_t>((h * b.rows + row) * b.tokens + j)];
      v = fusion == HeadFusion::max ? std::max(v, a) : std::min(v, a);
    }
    out[static_cast<size_t>(j)] = v;
  }
  return out;
}

// Sets the floor(ratio * tokens) smallest entries of `row` to 0, entry 0 (the class token) exempt; ties go to the
// lower index first.
void discard_smallest(std::vector<double>& row, double ratio) {
  const size_t count = static_cast<size_t>(std::floor(ratio * static_cast<double>(row.size())));
  if (count == 0) return;
  std::vector<size_t> order(row.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return row[a] < row[b]; });
  for (size_t k = 0; k < count; ++k)
    if (order[k] != 0) row[order[k]] = 0.0;
}

// v^T M for the block's fused matrix M, M given row by row (only v's non-zero entries' rows are formed).
template <class RowOf>
std::vector<double> times_matrix(const std::vector<double>& v, int64_t tokens, RowOf row_of) {
  std::vector<double> out(static_cast<size_t>(tokens), 0.0);
  for (int64_t i = 0; i < tokens; ++i) {
    const double w = v[static_cast<size_t>(i)];
    if (w == 0.0) continue;
    const std::vector<double> row = row_of(i);
    for (int64_t j = 0; j < tokens; ++j) out[static_cast<size_t>(j)] += w * row[static_cast<size_t>(j)];
  }
  return out;
}

std::vector<double> patch_part(const std::vector<double>& v, int64_t patches) {
  return std::vector<double>(v.end() - patches, v.end());
}

}  // namespace

std::vector<double> readout_weights(HeadKind head, int64_t tokens, int64_t patches) {
  VP_REQUIRE(patches > 0 && patches < tokens, "explain: ", patches, " patch tokens of ", tokens);
  std::vector<double> r(static_cast<size_t>(tokens), 0.0);
  switch (head) {
    case HeadKind::cls_token:
      r[0] = 1.0;
      break;
    case HeadKind::cls_and_distillation:
      r[0] = r[1] = 0.5;
      break;
    case HeadKind::cls_and_patch_mean:
      r[0] = 0.5;
      for (int64_t j = tokens - patches; j < tokens; ++j)
        r[static_cast<size_t>(j)] = 0.5 / static_cast<double>(patches);
      break;
  }
  return r;
}

namespace {

void check_readout(const std::vector<BlockAttention>& blocks, const std::vector<double>& readout) {
  VP_REQUIRE(readout.size() == static_cast<size_t>(blocks.front().tokens), "explain: ", readout.size(),
             " readout weights for ", blocks.front().tokens, " tokens");
  if (blocks.back().rows == 1) {
    for (size_t j = 1; j < readout.size(); ++j)
      VP_REQUIRE(readout[j] == 0.0,
                 "explain: the final block holds token 0's attention alone, but the head reads token ", j);
  }
}

}  // namespace

// Only the readout's row of the product is wanted: r^T A_L ... A_1, a vector-matrix product per block.
std::vector<double> attention_rollout(const std::vector<BlockAttention>& blocks, const std::vector<double>& readout,
                                      int64_t patches, const RolloutOptions& options) {
  check_rollout_options(options);
  check_blocks(blocks, patches, false);
  check_readout(blocks, readout);
  const int64_t t = blocks.front().tokens;
  auto residual_row = [&options](const BlockAttention& b, int64_t row) {
    std::vector<double> r = head_fused_row(b, b.rows == 1 ? 0 : row, options.head_fusion);
    discard_smallest(r, options.discard_ratio);
    for (double& x : r) x *= 0.5;
    r[static_cast<size_t>(row)] += 0.5;
    double sum = 0;
    for (double x : r) sum += x;
    for (double& x : r) x /= sum;
    return r;
  };
  std::vector<double> v = readout;
  for (size_t i = blocks.size(); i-- > 0;) {
    v = times_matrix(v, t, [&](int64_t row) { return residual_row(blocks[i], row); });
  }
  return patch_part(v, patches);
}

// R_L = (I + A_L) ... (I + A_1) with A_l = E_h[(grad * A)^+]; the readout's row again, from the last block down.
std::vector<double> gradient_weighted_rollout(const std::vector<BlockAttention>& blocks,
                                              const std::vector<double>& readout, int64_t patches) {
  check_blocks(blocks, patches, true);
  check_readout(blocks, readout);
  const int64_t t = blocks.front().tokens;
  auto positive = [](double a, double g) { return std::max(0.0, a * g); };
  std::vector<double> v = readout;
  for (size_t i = blocks.size(); i-- > 0;) {
    const BlockAttention& b = blocks[i];
    // With rows == 1 (the last block) v is e0 and only row 0 is formed.
    const std::vector<double> vm =
        times_matrix(v, t, [&](int64_t row) { return fused_row(b, b.rows == 1 ? 0 : row, positive); });
    for (int64_t j = 0; j < t; ++j) v[static_cast<size_t>(j)] += vm[static_cast<size_t>(j)];
  }
  return patch_part(v, patches);
}

std::vector<double> grad_cam(const std::vector<double>& activations, const std::vector<double>& gradients,
                             int64_t tokens, int64_t dim, int64_t patches) {
  VP_REQUIRE(patches > 0 && patches < tokens, "explain: ", patches, " patch tokens of ", tokens);
  VP_REQUIRE(activations.size() == static_cast<size_t>(tokens * dim) && gradients.size() == activations.size(),
             "explain: Grad-CAM activations and gradients must be [tokens, dim]");
  const int64_t first = tokens - patches;
  std::vector<double> weight(static_cast<size_t>(dim), 0.0);
  for (int64_t p = first; p < tokens; ++p)
    for (int64_t c = 0; c < dim; ++c) weight[static_cast<size_t>(c)] += gradients[static_cast<size_t>(p * dim + c)];
  for (double& w : weight) w /= static_cast<double>(patches);
  std::vector<double> cam(static_cast<size_t>(patches), 0.0);
  for (int64_t p = first; p < tokens; ++p) {
    double s = 0;
    for (int64_t c = 0; c < dim; ++c)
      s += weight[static_cast<size_t>(c)] * activations[static_cast<size_t>(p * dim + c)];
    cam[static_cast<size_t>(p - first)] = std::max(0.0, s);
  }
  return cam;
}

}  // namespace vitpipe
