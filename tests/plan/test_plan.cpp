// The planner's parts against what they model: the memory plan against the tensors ViTStage really allocates, the
// link parser, cost-balanced boundaries, and the search on a synthetic profile (known costs, known answers).
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/backend.h"
#include "backend/cuda/workspace_sizes.h"
#include "model/vit_stage.h"
#include "parallel/local_communicator.h"
#include "parallel/pipeline_executor.h"
#include "plan/gpu_memory_budget.h"
#include "plan/layout_search.h"
#include "plan/link_model.h"
#include "plan/memory_model.h"
#include "util/error.h"
#include "util/median.h"

namespace vitpipe {
namespace {

ViTConfig small_config(int layers = 4) {
  ViTConfig c;
  c.hidden_size = 32;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.intermediate_size = 48;
  c.image_size = 16;
  c.patch_size = 4;
  c.labels = {"a", "b", "c"};
  return c;
}

// DINOv2 with registers: LayerScale, SwiGLU, the [CLS, patch mean] head, positions resampled to another grid.
ViTConfig dinov2_config() {
  ViTConfig c = small_config();
  c.model_type = "dinov2_with_registers";
  c.layer_scale = true;
  c.swiglu = true;
  c.head = HeadKind::cls_and_patch_mean;
  c.num_register_tokens = 2;
  c.position_interpolation = PositionInterpolation::bicubic_antialias;
  c.input_image_size = 12;
  c.validate("test");
  return c;
}

TEST(PlanMemory, ActivationPlanMatchesWhatTheStageAllocates) {
  for (const ViTConfig& config : {small_config(), dinov2_config()}) {
    auto layout = std::make_shared<const ParameterLayout>(config);
    auto backend = make_cpu_backend();
    const int head = layout->num_segments() - 1;
    for (auto [first, last] : {std::pair{0, head}, {0, 0}, {0, 2}, {1, 3}, {2, head}, {head, head}, {4, head}}) {
      for (Precision precision : {Precision::fp32, Precision::bf16}) {
        for (int variant = 0; variant < 3; ++variant) {  // plain, recompute, split backward
          for (int64_t b : {1, 3}) {
            StageOptions o;
            o.first_segment = first;
            o.last_segment = last;
            o.precision = precision;
            o.recompute = variant == 1;
            o.split_backward = variant == 2;
            o.max_micro_batch = b;
            o.slots = 2;
            const ViTStage stage(layout, *backend, o);
            EXPECT_EQ(planned_activation_bytes(layout->config(), first, last, precision, o.recompute, o.split_backward,
                                               b, o.slots),
                      stage.activation_bytes())
                << "segments " << first << ".." << last << " " << precision_name(precision) << " variant " << variant
                << " micro-batch " << b << " " << config.model_type;
          }
        }
      }
    }
  }
}

TEST(PlanLink, ParsesUnitsAndRefusesNonsense) {
  const LinkModel a = parse_link("10Gbit,20us");
  EXPECT_DOUBLE_EQ(a.bandwidth, 1.25e9);
  EXPECT_DOUBLE_EQ(a.latency, 20e-6);
  EXPECT_DOUBLE_EQ(parse_link("100Gb/s").bandwidth, 12.5e9);
  EXPECT_DOUBLE_EQ(parse_link("2GiB/s,1ms").bandwidth, 2.0 * 1073741824);
  EXPECT_DOUBLE_EQ(parse_link("2GiB/s,1ms").latency, 1e-3);
  EXPECT_NEAR(a.transfer_seconds(1.25e9), 1.0 + 20e-6, 1e-12);
  for (const char* bad : {"fast", "10", "10Gbit,soon", "0Gbit", "-1Gbit", "10Gbit,20"}) {
    EXPECT_THROW(parse_link(bad), Error) << bad;
  }
  try {
    parse_link("10furlongs");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--link"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Gbit"), std::string::npos) << e.what();
  }
}

// A profile with exact, linear costs: a block's forward 1 s per sample, backward 2 (B 1.2, W 0.8); the embeddings
// and head cost `ends` times a block.
ModelProfile synthetic_profile(double ends) {
  ModelProfile p;
  for (int64_t b : {1, 2, 4, 8, 16, 32}) {
    ProfilePoint q;
    q.micro_batch = b;
    const double x = static_cast<double>(b);
    q.block = {x, 2 * x, 1.2 * x, 0.8 * x};
    q.classifier_block = {0.25 * x, 0.5 * x, 0.3 * x, 0.2 * x};
    q.embeddings = {ends * x, 2 * ends * x, 1.2 * ends * x, 0.8 * ends * x};
    q.head = {ends * x, 2 * ends * x, 1.2 * ends * x, 0.8 * ends * x};
    p.points.push_back(q);
  }
  p.optimizer_seconds_per_element = {{"adamw", 1e-9}, {"lamb", 2e-9}, {"sgd", 5e-10}};
  return p;
}

PlanInputs inputs(int processes, int64_t batch, double memory) {
  PlanInputs in;
  in.config = small_config(12);
  in.global_batch = batch;
  in.processes = processes;
  in.processes_per_node = 1;  // one per node: no oversubscription
  in.cores_per_node = 1;
  in.memory_per_process = memory;
  in.link = parse_link("100Gbit,1us");
  return in;
}

// The ring-rate measurement's contract on ranks as threads (its real use, across namespaced hosts' link, is checked
// by multihost.equal.stages2x2): both ends return the same positive rate, and only a pair is taken.
TEST(PlanLink, RingRateIsOneFigureForBothEnds) {
  double rates[2] = {0, 0};
  run_local_ranks(2, [&](Communicator& comm) { rates[comm.rank()] = measure_ring_rate(comm, 1e6); });
  EXPECT_GT(rates[0], 0.0);
  EXPECT_EQ(rates[0], rates[1]);
  run_local_ranks(3, [&](Communicator& comm) { EXPECT_THROW(measure_ring_rate(comm, 1e6), Error); });
}

TEST(PlanSearch, BoundariesAreBalancedByCostNotLayerCount) {
  PlanInputs in = inputs(4, 16, 1e12);
  Layout l;
  l.stages = 4;
  l.micro_batch = 1;
  l.micro_batches = 16;
  // Free embeddings and head: 12 blocks in 3s, except that the final block (classifier token only) is cheap.
  LayoutPrediction even = predict_layout(in, synthetic_profile(0.0), l);
  EXPECT_EQ(even.layout.layers_per_stage, (std::vector<int>{3, 3, 3, 3}));
  // Embeddings and head as heavy as 3 blocks each: the end stages take fewer blocks.
  LayoutPrediction heavy = predict_layout(in, synthetic_profile(3.0), l);
  const auto& split = heavy.layout.layers_per_stage;
  ASSERT_EQ(split.size(), 4u);
  EXPECT_LT(split.front(), 3);
  EXPECT_LT(split.back(), 4);
  EXPECT_EQ(split[0] + split[1] + split[2] + split[3], 12);
}

TEST(PlanSearch, ZeroBubbleBeatsOneFOneBAndBubblesFollowTheSimulator) {
  PlanInputs in = inputs(4, 16, 1e12);
  in.stages = 4;
  in.micro_batch = 2;
  const ModelProfile profile = synthetic_profile(0.0);
  const Plan plan = plan_layouts(in, profile);
  ASSERT_FALSE(plan.ranked.empty());
  double one_f_one_b = 0, zero_bubble = 0;
  for (const auto& x : plan.ranked) {
    if (x.layout.recompute || x.layout.shard) continue;
    if (x.layout.schedule == ScheduleKind::one_f_one_b) one_f_one_b = x.step_seconds;
    if (x.layout.schedule == ScheduleKind::zero_bubble_h1) zero_bubble = x.step_seconds;
  }
  EXPECT_GT(one_f_one_b, 0);
  EXPECT_LT(zero_bubble, one_f_one_b);
  for (size_t i = 1; i < plan.ranked.size(); ++i)
    EXPECT_LE(plan.ranked[i - 1].step_seconds, plan.ranked[i].step_seconds);
}

TEST(PlanSearch, ShardingCutsOptimizerMemoryByTheReplicas) {
  PlanInputs in = inputs(4, 16, 1e12);
  in.stages = 1;
  in.micro_batch = 4;
  in.schedule = ScheduleKind::one_f_one_b;
  in.recompute = false;
  const ModelProfile profile = synthetic_profile(0.5);
  in.shard = false;
  const LayoutPrediction full = plan_layouts(in, profile).ranked.at(0);
  in.shard = true;
  const LayoutPrediction sharded = plan_layouts(in, profile).ranked.at(0);
  EXPECT_TRUE(sharded.layout.shard);
  EXPECT_NEAR(sharded.memory.optimizer, full.memory.optimizer / 4, 1e-6 * full.memory.optimizer);
  EXPECT_DOUBLE_EQ(sharded.memory.parameters, full.memory.parameters);
  // The same bytes on the wire: a reduce-scatter plus an all-gather is an all-reduce.
  EXPECT_NEAR(sharded.volume.wire, full.volume.wire, 1e-6 * full.volume.wire);
  EXPECT_DOUBLE_EQ(sharded.volume.reduce_scatter, full.volume.allreduce);
}

// 4 processes on 2 nodes of 2 cores, with the link between the nodes and the one inside them.
PlanInputs two_nodes_of_two(const char* link, const char* local_link) {
  PlanInputs in = inputs(4, 16, 1e12);
  in.processes_per_node = 2;
  in.cores_per_node = 2;
  in.link = parse_link(link);
  in.local_link = parse_link(local_link);
  return in;
}

Layout two_stages_by_two_replicas() {
  Layout l;
  l.stages = 2;
  l.replicas = 2;
  l.micro_batch = 2;
  l.micro_batches = 4;
  return l;
}

TEST(PlanSearch, AcrossNodesTheReductionStaysInsideANodeAndTakesItsSharedMemory) {
  // 2 nodes x 2 processes, 2 stages x 2 replicas, a slow link between the nodes and a fast one inside them.
  PlanInputs in = two_nodes_of_two("100Mbit,50us", "100Gbit,1us");
  const Layout l = two_stages_by_two_replicas();
  const ModelProfile profile = synthetic_profile(0.5);
  const LayoutPrediction placed = predict_layout(in, profile, l);
  // A stage's replicas share a node: only the activations cross, and the reduction costs the local link's time.
  EXPECT_EQ(placed.layout.rank_order, RankOrder::stage_major);
  EXPECT_GT(placed.cross_node_bytes, 0);
  EXPECT_LT(placed.cross_node_bytes, placed.volume.wire / 10);
  in.local_link = LinkModel{};  // unknown: every message takes the slow link
  const LayoutPrediction everywhere = predict_layout(in, profile, l);
  EXPECT_GT(everywhere.exposed_communication_seconds, 100 * placed.exposed_communication_seconds);
  EXPECT_NE(placed.layout.describe().find("ranks stage-major"), std::string::npos) << placed.layout.describe();
}

TEST(PlanSearch, RingsCrossingBetweenNodesShareTheNodesInterfaces) {
  // 2 nodes x 2 processes, 2 stages x 2 replicas with the replicas across the nodes (the order fixed as
  // VITPIPE_RANK_ORDER fixes it): both stages' rings cross the one link at once, so the worst stage's reduction takes
  // every stage's gradient through it, not its own alone.
  PlanInputs in = two_nodes_of_two("1Gbit,0us", "100Gbit,0us");
  const Layout l = two_stages_by_two_replicas();
  setenv("VITPIPE_RANK_ORDER", "replica-major", 1);
  const LayoutPrediction across = predict_layout(in, synthetic_profile(0.5), l);
  unsetenv("VITPIPE_RANK_ORDER");
  ASSERT_EQ(across.layout.rank_order, RankOrder::replica_major);
  const double model_bytes = across.volume.allreduce / 2;  // the payload counts each replica's whole gradient
  EXPECT_NEAR(across.exposed_communication_seconds, model_bytes / in.link.bandwidth, 1e-6);
  // 4 nodes of 1 process: each ring has links of its own, and the worst stage takes its own gradient's time.
  in.processes_per_node = 1;
  const LayoutPrediction apart = predict_layout(in, synthetic_profile(0.5), l);
  EXPECT_LT(apart.exposed_communication_seconds, 0.8 * across.exposed_communication_seconds);
}

TEST(PlanSearch, NothingFitsSaysWhatWould) {
  PlanInputs in = inputs(2, 8, 1.0);  // one byte per process
  const ModelProfile profile = synthetic_profile(0.5);
  const Plan plan = plan_layouts(in, profile);
  EXPECT_TRUE(plan.ranked.empty());
  ASSERT_TRUE(plan.least_memory.has_value());
  const std::string hint = what_would_fit(in, profile, plan);
  EXPECT_NE(hint.find("needs"), std::string::npos) << hint;
  EXPECT_NE(hint.find("per process"), std::string::npos) << hint;
  // Enough memory for the smallest layout of 2 processes but not of 1: the hint names it.
  in.memory_per_process = plan.least_memory->memory.total() * 1.01;
  EXPECT_FALSE(plan_layouts(in, profile).ranked.empty());
}

TEST(PlanSearch, ConstraintsFixThatPartOfTheSearch) {
  PlanInputs in = inputs(8, 32, 1e12);
  in.stages = 2;
  in.schedule = ScheduleKind::gpipe;
  const Plan plan = plan_layouts(in, synthetic_profile(0.2));
  ASSERT_FALSE(plan.ranked.empty());
  for (const auto& x : plan.ranked) {
    EXPECT_EQ(x.layout.stages, 2);
    EXPECT_EQ(x.layout.replicas, 4);
    EXPECT_EQ(x.layout.schedule, ScheduleKind::gpipe);
  }
  const auto flags = plan.ranked.front().layout.train_flags();
  EXPECT_EQ(flags.at(0), "--pipeline-stages");
  EXPECT_EQ(flags.at(1), "2");
}

TrainingMode frozen_layers(int64_t n) {
  TrainingMode m;
  m.freeze = FreezeMode::layers;
  m.frozen_layers = n;
  return m;
}

TEST(PlanTrainingMode, FrozenSegmentsGetNoBackwardAndBoundariesFollow) {
  PlanInputs in = inputs(2, 16, 1e12);
  Layout l;
  l.stages = 2;
  l.micro_batch = 2;
  l.micro_batches = 8;
  l.layers_per_stage = {6, 6};
  const ModelProfile profile = synthetic_profile(0.5);
  const LayoutPrediction full = predict_layout(in, profile, l);
  in.mode = frozen_layers(6);  // the embeddings and blocks 0-5: all of stage 0
  const LayoutPrediction frozen = predict_layout(in, profile, l);
  ASSERT_EQ(full.stage_passes.size(), 2u);
  ASSERT_EQ(frozen.stage_passes.size(), 2u);
  EXPECT_GT(full.stage_passes[0].backward, 0.0);
  EXPECT_EQ(frozen.stage_passes[0].backward, 0.0);
  EXPECT_EQ(frozen.stage_passes[0].backward_weight, 0.0);
  EXPECT_DOUBLE_EQ(frozen.stage_passes[0].forward, full.stage_passes[0].forward);
  EXPECT_DOUBLE_EQ(frozen.stage_passes[1].backward, full.stage_passes[1].backward);
  EXPECT_LT(frozen.step_seconds, full.step_seconds);
  // Frozen blocks keep no gradients or optimizer state (their values stay).
  EXPECT_LT(frozen.memory.total(), full.memory.total());
  // Balanced by cost, the stage of forward-only blocks takes more of them.
  Layout balanced = l;
  balanced.layers_per_stage.clear();
  const LayoutPrediction moved = predict_layout(in, profile, balanced);
  EXPECT_GT(moved.layout.layers_per_stage.at(0), 6) << moved.layout.describe();
  // A frozen backbone: only the head's passes go backward.
  in.mode = TrainingMode{};
  in.mode.freeze = FreezeMode::backbone;
  const LayoutPrediction probe = predict_layout(in, profile, l);
  EXPECT_EQ(probe.stage_passes[0].backward, 0.0);
  EXPECT_DOUBLE_EQ(probe.stage_passes[1].backward, profile.at(SegmentKind::head, 2).backward);
}

// The profile itself is measured in the run's training mode (each measured on this CPU, so only orders are asserted,
// where the work differs many times over: a frozen block's backward does nothing, LoRA's W pass computes rank-2
// matrices instead of four weight matrices).
TEST(PlanTrainingMode, ProfileIsMeasuredInTheTrainingMode) {
  ProfileRequest request;
  request.config = small_config(3);
  request.config.hidden_size = 128;
  request.config.intermediate_size = 512;
  request.config.image_size = 32;  // 64 patches of 4 x 4
  request.micro_batches = {4};
  ProfileRequest lora = request, probe = request;
  lora.mode.freeze = FreezeMode::lora;
  lora.mode.lora.rank = 2;
  lora.mode.lora.targets = {LinearSite::query, LinearSite::value};
  probe.mode.freeze = FreezeMode::backbone;
  EXPECT_NE(profile_key(request), profile_key(lora));
  EXPECT_NE(profile_key(request), profile_key(probe));
  ProfileWork work;
  work.micro_batches = {4};
  const PassTimes full_block = measure_profile_work(request, work, {}).points.at(0).block;
  const PassTimes lora_block = measure_profile_work(lora, work, {}).points.at(0).block;
  const ProfilePoint probe_point = measure_profile_work(probe, work, {}).points.at(0);
  EXPECT_LT(lora_block.backward_weight, 0.5 * full_block.backward_weight);
  EXPECT_LT(probe_point.block.backward, 0.1 * full_block.backward);
  EXPECT_LT(probe_point.embeddings.backward, 0.1 * full_block.backward);
}

TEST(PlanSimulator, UnequalStagesTakeTheSlowestStagesTime) {
  // 1F1B, 2 stages, 4 micro-batches: stage 1 twice as slow. Its busy time bounds the makespan from below.
  std::vector<SimulationCosts> costs(2);
  costs[1].forward = 2;
  costs[1].backward = 4;
  const auto sim = simulate_schedules(make_all_schedules(ScheduleKind::one_f_one_b, 2, 4), 4, 1, costs);
  EXPECT_GE(sim.makespan, 4 * (2 + 4));
  EXPECT_LT(sim.stage_bubble[1], sim.stage_bubble[0]);
}

// Measured by 2 ranks at once, every pass twice as slow as measured alone.
ModelProfile together_and_alone() {
  ModelProfile p = synthetic_profile(1.0);
  p.alone_points = p.points;
  for (ProfilePoint& q : p.points) {
    for (PassTimes* t : {&q.embeddings, &q.block, &q.classifier_block, &q.head}) {
      *t = {2 * t->forward, 2 * t->backward, 2 * t->backward_input, 2 * t->backward_weight};
    }
  }
  p.measured_together = 2;
  return p;
}

Layout two_stages(int64_t micro_batch, int micro_batches) {
  Layout l;
  l.stages = 2;
  l.micro_batch = micro_batch;
  l.micro_batches = micro_batches;
  return l;
}

TEST(PlanOverlap, PassesCostBetweenAloneAndTogetherByTheOtherRanksComputingMeanwhile) {
  const PlanInputs in = inputs(2, 16, 1e12);
  const ModelProfile both = together_and_alone();
  ModelProfile together = both, alone = both;
  together.alone_points.clear();
  alone.points = alone.alone_points;
  alone.alone_points.clear();
  ASSERT_TRUE(both.has_alone());
  ASSERT_FALSE(together.has_alone());

  // One micro-batch through 2 stages: they never compute at the same moment, so every pass costs as alone.
  const double one_both = predict_layout(in, both, two_stages(16, 1)).pipeline_seconds;
  EXPECT_NEAR(one_both, predict_layout(in, alone, two_stages(16, 1)).pipeline_seconds, 1e-9 * one_both);
  EXPECT_LT(one_both, 0.6 * predict_layout(in, together, two_stages(16, 1)).pipeline_seconds);

  // Eight: the stages overlap in the steady state and not in the fill and drain, so the step lies strictly between.
  const double eight_both = predict_layout(in, both, two_stages(2, 8)).pipeline_seconds;
  const double eight_alone = predict_layout(in, alone, two_stages(2, 8)).pipeline_seconds;
  const double eight_together = predict_layout(in, together, two_stages(2, 8)).pipeline_seconds;
  EXPECT_GT(eight_both, 1.2 * eight_alone);
  EXPECT_LT(eight_both, 0.95 * eight_together);

  // Data parallel: every rank computes all the time, the times measured together hold as they are.
  Layout replicas;
  replicas.replicas = 2;
  replicas.micro_batch = 8;
  replicas.micro_batches = 1;
  EXPECT_DOUBLE_EQ(predict_layout(in, both, replicas).step_seconds,
                   predict_layout(in, together, replicas).step_seconds);

  // A profile measured by another number of ranks than the job has says nothing of this job's overlap.
  PlanInputs four = inputs(4, 16, 1e12);
  Layout two_by_two = two_stages(2, 4);
  two_by_two.replicas = 2;
  EXPECT_DOUBLE_EQ(predict_layout(four, both, two_by_two).pipeline_seconds,
                   predict_layout(four, together, two_by_two).pipeline_seconds);
}

TEST(PlanOverlap, RanksTimeSlicingTheCoresSliceOnlyBeyondThem) {
  // 4 ranks of 1 thread measured at once on 2 cores: 2.2 x alone, 2 of it time-slicing, 1.1 shared bandwidth.
  EXPECT_DOUBLE_EQ(between_alone_and_together(1.0, 2.2, 0.0, 4, 1, 2), 1.0);
  EXPECT_NEAR(between_alone_and_together(1.0, 2.2, 1.0, 4, 1, 2), 2.2, 1e-12);
  // One other rank running on average: 2 ranks on 2 cores do not slice; a third of the shared part remains.
  EXPECT_NEAR(between_alone_and_together(1.0, 2.2, 1.0 / 3, 4, 1, 2), 1.0 + 0.1 / 3, 1e-12);
  // Two others: 3 ranks on 2 cores slice by 1.5.
  EXPECT_NEAR(between_alone_and_together(1.0, 2.2, 2.0 / 3, 4, 1, 2), 1.5 * (1.0 + 0.1 * 2 / 3), 1e-12);
  // The same ranks on hosts of their own (together barely slower than alone): the difference grows linearly.
  EXPECT_NEAR(between_alone_and_together(1.0, 1.1, 0.5, 4, 1, 2), 1.05, 1e-12);
  // Not oversubscribed (2 ranks, 2 cores): linear too.
  EXPECT_NEAR(between_alone_and_together(1.0, 1.6, 0.25, 2, 1, 2), 1.15, 1e-12);
}

TEST(PlanProfile, TimesMeasuredAloneTravelThroughTheCache) {
  ModelProfile p = together_and_alone();
  p.key = "k";
  const ModelProfile back = ModelProfile::from_json(p.to_json(), "test");
  EXPECT_TRUE(back.has_alone());
  EXPECT_EQ(back.measured_together, 2);
  EXPECT_DOUBLE_EQ(back.alone_at(SegmentKind::block, 3).forward, 3.0);
  EXPECT_DOUBLE_EQ(back.at(SegmentKind::block, 3).forward, 6.0);
  // Alone times for fewer sizes than the together ones are not used.
  p.alone_points.pop_back();
  EXPECT_FALSE(ModelProfile::from_json(p.to_json(), "test").has_alone());
  EXPECT_THROW(p.alone_at(SegmentKind::block, 1), Error);
}

TEST(PlanProfile, MedianIsTheUpperMiddleSoProfileAndTrainerAgree) {
  // The profile keeps the median of its samples and the trainer reports the median of measured steps: one rule.
  EXPECT_EQ(median_of({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median_of({4.0, 1.0, 3.0, 2.0}), 3.0);
  EXPECT_EQ(median_of({0.5}), 0.5);
  EXPECT_EQ(median_of({}), 0.0);
}

// --device cuda: every rank also holds the CUDA backend's workspaces, at the sizes the backend allocates.
TEST(PlanCudaWorkspaces, CountedAtTheBackendsSizesAndListedInTheJson) {
  PlanInputs in = inputs(4, 16, 1e12);
  in.cuda = true;
  in.stages = 4;
  const LayoutPrediction x = plan_layouts(in, synthetic_profile(0.5)).ranked.at(0);
  EXPECT_EQ(x.memory.cuda.cublaslt, static_cast<double>(cuda::kCublasLtWorkspaceBytes));
  EXPECT_EQ(x.memory.cuda.cudnn, static_cast<double>(cuda::kCudnnWorkspaceBytes));
  EXPECT_EQ(x.memory.cuda.arena, static_cast<double>(cuda::kArenaBytes));
  // The worst rank of 4 stages is a middle one: 2 neighbours, a buffer each way.
  EXPECT_EQ(x.memory.cuda.nccl, 4.0 * static_cast<double>(cuda::kNcclBufferBytesPerPeer));
  const nlohmann::json j = prediction_json(x);
  EXPECT_EQ(j.at("memory").at("cuda_workspaces").at("cudnn").get<double>(), x.memory.cuda.cudnn);
  EXPECT_EQ(j.at("memory").at("cuda_workspaces").at("nccl").get<double>(), x.memory.cuda.nccl);
  EXPECT_DOUBLE_EQ(j.at("memory_per_rank_bytes").get<double>(), x.memory.total());
}

TEST(PlanCudaWorkspaces, NcclPeersArePipelineNeighboursAndTheRing) {
  EXPECT_EQ(nccl_peers(1, 1, 1, 0), 0);
  EXPECT_EQ(nccl_peers(2, 1, 1, 0), 1);
  EXPECT_EQ(nccl_peers(3, 1, 1, 1), 2);
  EXPECT_EQ(nccl_peers(3, 1, 1, 2), 1);
  EXPECT_EQ(nccl_peers(3, 2, 1, 0), 2);  // interleaved: the last stage feeds the first
  EXPECT_EQ(nccl_peers(1, 1, 2, 0), 1);  // a ring of 2 is one peer
  EXPECT_EQ(nccl_peers(1, 1, 4, 0), 2);
  EXPECT_EQ(nccl_peers(2, 1, 4, 1), 3);
  EXPECT_EQ(cuda_workspaces(1, 1, 1, 0).nccl, 0.0);
}

// Memory enough for a layout on the CPU but not for it plus the workspaces: on cuda it is refused, and the search
// picks another layout (or none) instead of the one that fits only without them.
TEST(PlanCudaWorkspaces, ALayoutFittingOnlyWithoutThemIsNotChosen) {
  const ModelProfile profile = synthetic_profile(0.5);
  PlanInputs fixed = inputs(2, 8, 1e12);
  fixed.stages = 2;
  fixed.micro_batch = 2;
  fixed.schedule = ScheduleKind::one_f_one_b;
  fixed.recompute = false;
  fixed.shard = false;
  const LayoutPrediction cpu = plan_layouts(fixed, profile).ranked.at(0);
  EXPECT_EQ(cpu.memory.cuda.total(), 0.0);
  fixed.memory_per_process = cpu.memory.total() + 1024 * 1024;
  EXPECT_FALSE(plan_layouts(fixed, profile).ranked.empty());
  fixed.cuda = true;
  const Plan refused = plan_layouts(fixed, profile);
  EXPECT_TRUE(refused.ranked.empty());
  ASSERT_TRUE(refused.least_memory.has_value());
  EXPECT_GT(refused.least_memory->memory.total(), fixed.memory_per_process);

  PlanInputs open = inputs(4, 16, 1e12);
  const LayoutPrediction fastest = plan_layouts(open, profile).ranked.at(0);
  open.memory_per_process = fastest.memory.total();
  open.cuda = true;
  for (const auto& x : plan_layouts(open, profile).ranked) {
    EXPECT_NE(x.layout.describe(), fastest.layout.describe());
    EXPECT_GT(x.memory.cuda.total(), 0.0);
    EXPECT_LE(x.memory.total(), open.memory_per_process);
  }
}

// --device cuda: the profile is keyed by the GPU and its libraries (not the CPU and its threads), so a cpu and a cuda
// profile of the same model never share a cache file, and a change of GPU, library or TF32 measures again.
TEST(PlanCudaProfile, KeyNamesTheGpuAndItsLibrariesNotTheCpu) {
  ProfileRequest cpu;
  cpu.config = small_config();
  cpu.threads = 2;
  cpu.cache_dir = "/cache";
  ProfileRequest gpu = cpu;
  gpu.device = Device::cuda;
  EXPECT_THROW(profile_key(gpu), Error);  // a cuda request names its GPU
  gpu.gpu = {{"name", "Test GPU"},
             {"compute_capability", "8.0"},
             {"memory_bytes", uint64_t{40} << 30},
             {"driver", "13.0"},
             {"libraries", {{"cuda_runtime", 13000}, {"cublaslt", 130100}, {"cudnn", 91900}, {"nccl", 22809}}}};
  const std::string key = profile_key(gpu);
  EXPECT_NE(key.find("device=cuda gpu=Test GPU sm=8.0 memory=42949672960 driver=13.0"), std::string::npos) << key;
  EXPECT_NE(key.find("\"cudnn\":91900"), std::string::npos) << key;
  EXPECT_EQ(key.find(" cpu="), std::string::npos) << key;
  EXPECT_EQ(key.find(" threads="), std::string::npos) << key;
  EXPECT_NE(profile_key(cpu).find(" cpu="), std::string::npos);
  EXPECT_NE(profile_cache_file(cpu), profile_cache_file(gpu));
  EXPECT_EQ(profile_cache_file(gpu).parent_path(), std::filesystem::path("/cache"));

  ProfileRequest other = gpu;
  other.threads = 7;  // the host's threads only launch kernels
  EXPECT_EQ(profile_key(other), key);
  other.allow_tf32 = true;
  EXPECT_NE(profile_key(other), key);
  other = gpu;
  other.gpu["libraries"]["cudnn"] = 92100;
  EXPECT_NE(profile_key(other), key);
  other = gpu;
  other.gpu["name"] = "Other GPU";
  EXPECT_NE(profile_cache_file(other), profile_cache_file(gpu));
}

TEST(PlanGpuMemory, BudgetIsTheFreeMemoryLessTheMargin) {
  const double gib = 1024.0 * 1024 * 1024;
  const GpuMemoryBudget h100 = gpu_memory_budget_of(79 * gib, 80 * gib);
  EXPECT_DOUBLE_EQ(h100.margin_bytes, 4 * gib);  // 5%
  EXPECT_DOUBLE_EQ(h100.budget(), 75 * gib);
  const GpuMemoryBudget small = gpu_memory_budget_of(6 * gib, 8 * gib);
  EXPECT_DOUBLE_EQ(small.margin_bytes, gib);  // at least 1 GiB
  EXPECT_DOUBLE_EQ(small.budget(), 5 * gib);
  EXPECT_EQ(gpu_memory_budget_of(0.5 * gib, 8 * gib).budget(), 0.0);  // never negative
  EXPECT_NE(small.describe().find("free of"), std::string::npos);
}

// On GPUs the host's memory (the process overhead, the loader's batches) is not device memory, and ranks sharing a
// node's cores do not slow each other's passes: each computes on its own GPU.
TEST(PlanCudaWorkspaces, HostMemoryAndCoreSharingAreNotTheGpus) {
  const ModelProfile profile = synthetic_profile(0.5);
  PlanInputs in = inputs(4, 16, 1e12);
  in.stages = 4;
  in.micro_batch = 2;
  in.schedule = ScheduleKind::one_f_one_b;
  in.recompute = false;
  in.shard = false;
  in.processes_per_node = 4;  // 4 ranks x 2 threads on 2 cores: 4x oversubscribed on the CPU
  in.threads_per_process = 2;
  in.cores_per_node = 2;
  const LayoutPrediction cpu = plan_layouts(in, profile).ranked.at(0);
  in.cuda = true;
  in.gpus_per_node = 4;
  const LayoutPrediction gpu = plan_layouts(in, profile).ranked.at(0);
  EXPECT_GT(cpu.memory.loader, 0.0);
  EXPECT_EQ(gpu.memory.loader, 0.0);
  EXPECT_EQ(gpu.memory.overhead, 0.0);
  EXPECT_EQ(cpu.memory.cuda.total(), 0.0);
  EXPECT_GT(gpu.memory.cuda.total(), 0.0);
  ASSERT_EQ(gpu.stage_passes.size(), cpu.stage_passes.size());
  for (size_t s = 0; s < gpu.stage_passes.size(); ++s) {
    EXPECT_DOUBLE_EQ(cpu.stage_passes[s].forward, 4 * gpu.stage_passes[s].forward);
  }
  // The JSON says which device and where the budget came from.
  in.memory_source = "test";
  const nlohmann::json j = plan_json(in, plan_layouts(in, profile), 1);
  EXPECT_EQ(j.at("device"), "cuda");
  EXPECT_EQ(j.at("memory_source"), "test");
  EXPECT_EQ(j.at("gpus_per_node"), 4);
}

// Nothing measured NCCL between a node's GPUs: the figure used says so wherever the link is printed.
TEST(PlanLink, TheGpuLinkIsALabelledAssumption) {
  const LinkModel link = assumed_gpu_link();
  EXPECT_EQ(link.bandwidth, kAssumedGpuLinkBytesPerSecond);
  EXPECT_EQ(link.latency, kAssumedGpuLinkLatencySeconds);
  EXPECT_NE(link.describe().find("ASSUMED, not measured"), std::string::npos) << link.describe();
  EXPECT_EQ(link.collective_bandwidth, 0.0);  // nothing claims a measured reduction rate
}

}  // namespace
}  // namespace vitpipe
