// The executor against the plain model: P stages x R replicas (threads of one process, local communicator) must
// produce the gradients of one stage holding the whole model on the whole global batch, and the same logits.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "backend/backend.h"
#include "model/vit_stage.h"
#include "parallel/local_communicator.h"
#include "parallel/pipeline_executor.h"
#include "util/random.h"
#include "util/threads.h"

namespace vitpipe {
namespace {

ViTConfig small_config() {
  ViTConfig c;
  c.hidden_size = 32;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.intermediate_size = 48;
  c.image_size = 16;
  c.patch_size = 8;
  c.labels = {"a", "b", "c"};
  return c;
}

struct Problem {
  std::shared_ptr<const ParameterLayout> layout = std::make_shared<const ParameterLayout>(small_config());
  FlatParameters values = FlatParameters::whole_model(layout);
  Tensor images, targets;
  int64_t batch = 8;

  Problem() {
    const ViTConfig& c = layout->config();
    Rng rng(3);
    for (int64_t i = 0; i < values.numel(); ++i) values.data()[i] = static_cast<float>(0.3 * rng.normal());
    images = Tensor::empty({batch, 3, c.image_size, c.image_size});
    for (int64_t i = 0; i < images.numel(); ++i) images.f32()[i] = static_cast<float>(rng.normal());
    targets = Tensor::empty({batch, c.num_labels()});
    for (int64_t i = 0; i < targets.numel(); ++i) targets.f32()[i] = rng.uniform() < 0.4 ? 1.0f : 0.0f;
  }

  // Reference: the whole model, the whole batch, one micro-batch.
  void reference(FlatParameters* grads, Tensor* logits, double* loss) const {
    auto backend = make_cpu_backend();
    StageOptions o;
    o.max_micro_batch = batch;
    ViTStage stage(layout, *backend, o);
    stage.parameters().flat().copy_from(values.flat());
    stage.zero_gradients();
    stage.input(0, batch).copy_from(images);
    stage.forward(0, batch);
    *loss = stage.loss(0, batch, targets, 1.0 / static_cast<double>(targets.numel())) /
            static_cast<double>(targets.numel());
    stage.backward(0, batch);
    *grads = FlatParameters::whole_model(layout);
    grads->flat().copy_from(stage.gradients().flat());
    *logits = stage.output(0, batch).clone();
  }
};

double relative_error(const float* a, const float* b, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

void check_pipeline(int stages, int replicas, ScheduleKind kind, int virtual_stages, int64_t micro_batch) {
  Problem problem;
  FlatParameters want_grads;
  Tensor want_logits;
  double want_loss = 0;
  problem.reference(&want_grads, &want_logits, &want_loss);
  const ViTConfig& c = problem.layout->config();
  const int layers = static_cast<int>(c.num_hidden_layers);
  const int64_t per_replica = problem.batch / replicas;
  const int m = static_cast<int>(per_replica / micro_batch);
  const auto pieces = split_segments(layers, stages * virtual_stages);
  std::mutex mutex;
  double loss_sum = 0;
  Tensor got_logits = Tensor::zeros(want_logits.shape());

  run_local_ranks(stages * replicas, [&](Communicator& world) {
    configure_threads(1);
    ProcessGrid grid(world.size(), world.rank(), stages);
    std::vector<std::unique_ptr<Backend>> backends;
    std::vector<std::unique_ptr<ViTStage>> owned;
    std::vector<ViTStage*> chunks;
    for (int chunk = 0; chunk < virtual_stages; ++chunk) {
      const SegmentRange range = pieces[static_cast<size_t>(chunk * stages + grid.stage())];
      StageOptions o;
      o.first_segment = range.first;
      o.last_segment = range.last;
      o.max_micro_batch = micro_batch;
      o.slots = activation_slots_needed(kind, stages, m, grid.stage(), virtual_stages);
      o.split_backward = schedule_splits_backward(kind);
      backends.push_back(make_cpu_backend());
      owned.push_back(std::make_unique<ViTStage>(problem.layout, *backends.back(), o));
      ViTStage& stage = *owned.back();
      std::copy(problem.values.at(stage.parameters().begin()),
                problem.values.at(stage.parameters().begin()) + stage.parameters().numel(), stage.parameters().data());
      stage.zero_gradients();
      chunks.push_back(&stage);
    }
    ExecutorOptions options;
    options.schedule = kind;
    options.virtual_stages = virtual_stages;
    options.buckets.bucket_bytes = 4096;  // several buckets, to exercise the overlap path
    PipelineExecutor executor(grid, world, chunks, options, nullptr);
    StepShape shape;
    shape.micro_batch_sizes.assign(static_cast<size_t>(m), micro_batch);
    shape.global_rows = problem.batch;
    const int64_t first_row = grid.replica() * per_replica;
    auto source = [&](int mb) {
      const int64_t begin = first_row + mb * micro_batch;
      MicroBatchData data;
      data.images = problem.images.slice(begin, begin + micro_batch);
      data.targets = problem.targets.slice(begin, begin + micro_batch);
      for (int64_t i = begin; i < begin + micro_batch; ++i) data.indices.push_back(i);
      return data;
    };
    const StepResult result = executor.train_step(shape, source);
    const double step_loss = world.allreduce(result.loss_sum);
    executor.forward_only(shape, source,
                          [&](const Tensor& logits, const Tensor&, const Tensor&, const std::vector<int64_t>& items) {
                            std::lock_guard lock(mutex);
                            for (size_t r = 0; r < items.size(); ++r) {
                              std::copy(logits.f32() + r * c.num_labels(), logits.f32() + (r + 1) * c.num_labels(),
                                        got_logits.f32() + items[r] * c.num_labels());
                            }
                          });
    std::lock_guard lock(mutex);
    loss_sum = step_loss;
    for (ViTStage* stage : chunks) {
      const int64_t n = stage->gradients().numel();
      const double err = relative_error(stage->gradients().data(), want_grads.at(stage->gradients().begin()), n);
      EXPECT_LT(err, 1e-5) << "rank " << world.rank() << " segments " << stage->options().first_segment << ".."
                           << stage->options().last_segment;
    }
  });
  EXPECT_NEAR(loss_sum / static_cast<double>(problem.targets.numel()), want_loss, 1e-6 * std::fabs(want_loss));
  EXPECT_LT(relative_error(got_logits.f32(), want_logits.f32(), want_logits.numel()), 1e-5);
}

TEST(PipelineExecutor, OneStageOneReplicaWithAccumulation) { check_pipeline(1, 1, ScheduleKind::one_f_one_b, 1, 2); }
TEST(PipelineExecutor, TwoStages1F1B) { check_pipeline(2, 1, ScheduleKind::one_f_one_b, 1, 2); }
TEST(PipelineExecutor, TwoReplicas) { check_pipeline(1, 2, ScheduleKind::one_f_one_b, 1, 2); }
TEST(PipelineExecutor, TwoStagesTwoReplicas1F1B) { check_pipeline(2, 2, ScheduleKind::one_f_one_b, 1, 2); }
TEST(PipelineExecutor, FourStagesGPipe) { check_pipeline(4, 1, ScheduleKind::gpipe, 1, 2); }
TEST(PipelineExecutor, ThreeStagesUnevenMicroBatches1F1B) { check_pipeline(3, 1, ScheduleKind::one_f_one_b, 1, 1); }
TEST(PipelineExecutor, InterleavedTwoChunks) { check_pipeline(2, 1, ScheduleKind::interleaved_1f1b, 2, 2); }
// ZB-H1: backward split into input (B) and weight (W) passes, W deferred into the bubbles.
TEST(PipelineExecutor, FourStagesZeroBubbleH1) { check_pipeline(4, 1, ScheduleKind::zero_bubble_h1, 1, 1); }
TEST(PipelineExecutor, TwoStagesTwoReplicasZeroBubbleH1) { check_pipeline(2, 2, ScheduleKind::zero_bubble_h1, 1, 1); }
TEST(PipelineExecutor, OneStageZeroBubbleH1) { check_pipeline(1, 1, ScheduleKind::zero_bubble_h1, 1, 2); }

}  // namespace
}  // namespace vitpipe
