#include "train/optimizer.h"

#include <charconv>
#include <cmath>

#include "train/optimizer_kinds.h"
#include "util/error.h"

namespace vitpipe {
namespace {

int64_t parse_int(const StringMap& metadata, const std::string& key, const std::string& source) {
  auto it = metadata.find(key);
  VP_REQUIRE(it != metadata.end(), source, ": optimizer metadata lacks \"", key, "\"");
  int64_t value = 0;
  const char* first = it->second.data();
  const char* last = first + it->second.size();
  auto [end, error] = std::from_chars(first, last, value);
  VP_REQUIRE(error == std::errc() && end == last && !it->second.empty(), source, ": optimizer metadata \"", key,
             "\" is '", it->second, "', expected an integer");
  return value;
}

}  // namespace

Optimizer::Optimizer(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout, int first_segment,
                     int last_segment, OptimizerShard shard, Backend* backend)
    : backend_(backend != nullptr ? backend : &host_backend()),
      config_(config),
      layout_(std::move(layout)),
      first_(first_segment),
      last_(last_segment),
      shard_(std::move(shard)) {
  config_.validate();
  VP_REQUIRE(0 <= first_ && first_ <= last_ && last_ < layout_->num_segments(), "optimizer: segment range [", first_,
             ", ", last_, "] is outside the model's ", layout_->num_segments(), " segments");
  range_begin_ = shard_.sharded() ? shard_.begin : layout_->segment_begin(first_);
  range_end_ = shard_.sharded() ? shard_.end : layout_->segment_end(last_);
  plan_ = UpdatePlan(*layout_, first_, last_, layer_lr_scales(layout_->num_segments(), config_.layer_decay),
                     config_.decay_all_parameters, range_begin_, range_end_);
}

size_t Optimizer::state_bytes() const {
  size_t total = 0;
  for (const auto& [name, buffer] : buffers()) total += buffer->flat().nbytes();
  return total;
}

void Optimizer::sum_across_shards(std::vector<double>& a, std::vector<double>& b) const {
  if (!shard_.sharded() || !shard_.sum_across_shards) return;
  // Indexed by the layout's parameters, so that every shard's entries mean the same tensor.
  const ParamSpec* first_spec = layout_->specs().data();
  std::vector<double> all(2 * layout_->specs().size(), 0.0);
  for (size_t i = 0; i < plan_.params().size(); ++i) {
    const auto spec = static_cast<size_t>(plan_.params()[i].spec - first_spec);
    all[2 * spec] = a[i];
    all[2 * spec + 1] = b[i];
  }
  shard_.sum_across_shards(all);
  for (size_t i = 0; i < plan_.params().size(); ++i) {
    const auto spec = static_cast<size_t>(plan_.params()[i].spec - first_spec);
    a[i] = all[2 * spec];
    b[i] = all[2 * spec + 1];
  }
}

void Optimizer::step(FlatParameters& params, const FlatParameters& grads, double lr) {
  for (const FlatParameters* flat : {static_cast<const FlatParameters*>(&params), &grads}) {
    const char* what = flat == &params ? "parameters" : "gradients";
    VP_REQUIRE(flat->numel() > 0 || plan_.numel() == 0, "optimizer step: empty ", what);
    VP_REQUIRE(flat->first_segment() == first_ && flat->last_segment() == last_, "optimizer for segments [", first_,
               ", ", last_, "] was given ", what, " of segments [", flat->first_segment(), ", ", flat->last_segment(),
               "]");
    VP_REQUIRE(flat->begin() <= range_begin_ && range_end_ <= flat->begin() + flat->numel(), "optimizer for elements [",
               range_begin_, ", ", range_end_, ") was given ", what, " of elements [", flat->begin(), ", ",
               flat->begin() + flat->numel(), ")");
    VP_REQUIRE(flat->layout().numel() == layout_->numel(), "optimizer step: ", what, " of a model with ",
               flat->layout().numel(), " parameters, the optimizer's has ", layout_->numel());
  }
  VP_REQUIRE(std::isfinite(lr) && lr >= 0.0, "optimizer step: learning rate must be finite and >= 0 (got ", lr, ")");
  ++step_count_;
  const int64_t p = range_begin_ - params.begin(), g = range_begin_ - grads.begin();
  update(params.flat().slice(p, p + plan_.numel()), grads.flat().slice(g, g + plan_.numel()), lr);
}

OptimizerStep Optimizer::step_args(const Tensor& params, const Tensor& grads, const FlatParameters* exp_avg,
                                   const FlatParameters* exp_avg_sq) const {
  OptimizerStep step;
  step.params = params;
  step.grads = grads;
  if (exp_avg != nullptr) step.exp_avg = exp_avg->flat();
  if (exp_avg_sq != nullptr) step.exp_avg_sq = exp_avg_sq->flat();
  step.runs = runs_;
  step.work_items = plan_.chunk_first_piece();
  return step;
}

TensorMap Optimizer::state_tensors() const {
  TensorMap tensors;
  for (const auto& [name, buffer] : buffers()) tensors[name] = buffer->flat();
  return tensors;
}

StringMap Optimizer::state_metadata() const {
  return {{"optimizer", config_.name()},
          {"step", std::to_string(step_count_)},
          {"first_segment", std::to_string(first_)},
          {"last_segment", std::to_string(last_)},
          {"begin", std::to_string(range_begin_)},
          {"numel", std::to_string(plan_.numel())},
          {"model_numel", std::to_string(layout_->numel())}};
}

void Optimizer::load_state(const TensorMap& tensors, const StringMap& metadata, const std::string& source) {
  auto name = metadata.find("optimizer");
  VP_REQUIRE(name != metadata.end(), source, ": optimizer metadata lacks \"optimizer\"");
  VP_REQUIRE(name->second == config_.name(), source, ": holds the state of optimizer '", name->second,
             "', this run uses '", config_.name(), "'");
  const int64_t first = parse_int(metadata, "first_segment", source);
  const int64_t last = parse_int(metadata, "last_segment", source);
  VP_REQUIRE(first == first_ && last == last_, source, ": optimizer state covers segments [", first, ", ", last,
             "], this stage holds [", first_, ", ", last_, "]");
  const int64_t model_numel = parse_int(metadata, "model_numel", source);
  VP_REQUIRE(model_numel == layout_->numel(), source, ": optimizer state is for a model of ", model_numel,
             " parameters, this model has ", layout_->numel());
  const int64_t begin = parse_int(metadata, "begin", source), numel = parse_int(metadata, "numel", source);
  VP_REQUIRE(begin == range_begin_ && numel == plan_.numel(), source, ": optimizer state covers elements [", begin,
             ", ", begin + numel, "), this optimizer holds [", range_begin_, ", ", range_begin_ + plan_.numel(), ")");
  const int64_t step = parse_int(metadata, "step", source);
  VP_REQUIRE(step >= 0, source, ": optimizer step count is negative (", step, ")");
  for (const auto& [key, buffer] : buffers()) {
    auto it = tensors.find(key);
    VP_REQUIRE(it != tensors.end(), source, ": optimizer state lacks tensor \"", key, "\"");
    VP_REQUIRE(it->second.dtype() == DType::f32 && it->second.shape() == Shape{plan_.numel()}, source,
               ": optimizer tensor \"", key, "\" is ", dtype_name(it->second.dtype()), " ",
               shape_string(it->second.shape()), ", expected F32 [", plan_.numel(), "]");
  }
  for (const auto& [key, buffer] : buffers()) backend_->copy_from_host(tensors.at(key), buffer->flat());
  step_count_ = step;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::shared_ptr<const ParameterLayout> layout,
                                          int first_segment, int last_segment, OptimizerShard shard, Backend* backend) {
  VP_REQUIRE(layout != nullptr, "optimizer: no parameter layout");
  std::unique_ptr<Optimizer> optimizer;
  switch (config.kind) {
    case OptimizerKind::adamw:
      optimizer = make_adamw(config, std::move(layout), first_segment, last_segment, std::move(shard), backend);
      break;
    case OptimizerKind::lamb:
      optimizer = make_lamb(config, std::move(layout), first_segment, last_segment, std::move(shard), backend);
      break;
    case OptimizerKind::sgd:
      optimizer = make_sgd(config, std::move(layout), first_segment, last_segment, std::move(shard), backend);
      break;
  }
  VP_REQUIRE(optimizer != nullptr, "optimizer: unknown kind");
  return optimizer;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, const FlatParameters& like,
                                          OptimizerShard shard, Backend* backend) {
  return make_optimizer(config, like.layout_ptr(), like.first_segment(), like.last_segment(), std::move(shard),
                        backend);
}

}  // namespace vitpipe
