#include "plan/layout_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "parallel/host_topology.h"
#include "parallel/pipeline_executor.h"
#include "parallel/process_grid.h"
#include "plan/rank_placement.h"
#include "util/error.h"
#include "util/progress.h"

namespace vitpipe {
namespace {

constexpr double kBucketBytes = 25.0 * 1024 * 1024;  // GradientBucketOptions' default

int layers_of(const ViTConfig& c) { return static_cast<int>(c.num_hidden_layers); }

SegmentKind kind_of(const ViTConfig& c, int segment, bool piece_has_head) {
  const int layers = layers_of(c);
  if (segment == 0) return SegmentKind::embeddings;
  if (segment == layers + 1) return SegmentKind::head;
  return segment == layers && piece_has_head ? SegmentKind::classifier_block : SegmentKind::block;
}

// The passes of a piece holding segments [first, last] at micro-batch b; recomputation runs each block's forward
// again before its backward. Segments below `trained` (the lowest that trains) have no backward pass.
// `alone`: the times measured with the other ranks idle (ModelProfile::alone_points).
PassTimes piece_times(const ModelProfile& profile, const ViTConfig& c, int first, int last, double b, bool recompute,
                      int trained, bool alone = false) {
  const bool has_head = last == layers_of(c) + 1;
  PassTimes sum;
  for (int s = first; s <= last; ++s) {
    const SegmentKind kind = kind_of(c, s, has_head);
    const PassTimes t = alone ? profile.alone_at(kind, b) : profile.at(kind, b);
    sum.forward += t.forward;
    if (s < trained) continue;
    sum.backward += t.backward;
    sum.backward_input += t.backward_input;
    sum.backward_weight += t.backward_weight;
    if (recompute && (kind == SegmentKind::block || kind == SegmentKind::classifier_block)) {
      sum.backward += t.forward;
      sum.backward_input += t.forward;
    }
  }
  return sum;
}

// Contiguous pieces of the segments minimising the most expensive piece (forward + backward): a linear partition.
std::vector<SegmentRange> balanced_pieces(const ModelProfile& profile, const ViTConfig& c, int pieces, double b,
                                          bool recompute, int trained) {
  const int segments = layers_of(c) + 2;
  auto cost = [&](int first, int last) {
    const PassTimes t = piece_times(profile, c, first, last, b, recompute, trained);
    return t.forward + t.backward;
  };
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the first i segments in k pieces; cut[k][i]: where the k-th piece starts.
  std::vector<std::vector<double>> best(static_cast<size_t>(pieces) + 1,
                                        std::vector<double>(static_cast<size_t>(segments) + 1, inf));
  std::vector<std::vector<int>> cut(best.size(), std::vector<int>(best[0].size(), 0));
  best[0][0] = 0;
  for (int k = 1; k <= pieces; ++k) {
    for (int i = k; i <= segments; ++i) {
      for (int j = k - 1; j < i; ++j) {
        if (best[k - 1][j] == inf) continue;
        const double v = std::max(best[k - 1][j], cost(j, i - 1));
        if (v < best[k][i]) {
          best[k][i] = v;
          cut[k][i] = j;
        }
      }
    }
  }
  std::vector<SegmentRange> out(static_cast<size_t>(pieces));
  for (int k = pieces, i = segments; k >= 1; --k) {
    const int j = cut[k][i];
    out[static_cast<size_t>(k - 1)] = SegmentRange{j, i - 1};
    i = j;
  }
  return out;
}

std::vector<int> blocks_per_piece(const ViTConfig& c, const std::vector<SegmentRange>& pieces) {
  std::vector<int> blocks;
  for (const SegmentRange& p : pieces) {
    int n = 0;
    for (int s = p.first; s <= p.last; ++s) n += s >= 1 && s <= layers_of(c) ? 1 : 0;
    blocks.push_back(n);
  }
  return blocks;
}

// The four passes, in PassTimes and SimulationCosts alike, and the one a simulated instruction runs.
constexpr double PassTimes::*kPassTimes[] = {&PassTimes::forward, &PassTimes::backward, &PassTimes::backward_input,
                                             &PassTimes::backward_weight};
constexpr double SimulationCosts::*kPassCosts[] = {&SimulationCosts::forward, &SimulationCosts::backward,
                                                   &SimulationCosts::backward_input, &SimulationCosts::backward_weight};

size_t pass_of(Op op) {
  switch (op) {
    case Op::backward:
      return 1;
    case Op::backward_input:
      return 2;
    case Op::backward_weight:
      return 3;
    default:
      return 0;  // the forward (with the loss on the last stage)
  }
}

void add(PassTimes& sum, const PassTimes& t) {
  for (double PassTimes::*pass : kPassTimes) sum.*pass += t.*pass;
}

// Busy time of one stage's timeline before t: the compute intervals are disjoint and in order.
class BusyClock {
 public:
  explicit BusyClock(const std::vector<TimedInstruction>& timeline) {
    for (const TimedInstruction& t : timeline) {
      if (t.end <= t.start) continue;
      starts_.push_back(t.start);
      ends_.push_back(t.end);
      before_.push_back(before_.empty() ? 0.0
                                        : before_.back() + (ends_[ends_.size() - 2] - starts_[starts_.size() - 2]));
    }
  }
  double busy_before(double t) const {
    const auto i = std::upper_bound(starts_.begin(), starts_.end(), t) - starts_.begin();
    if (i == 0) return 0.0;
    const auto k = static_cast<size_t>(i - 1);
    return before_[k] + std::min(t, ends_[k]) - starts_[k];
  }

 private:
  std::vector<double> starts_, ends_, before_;  // before_[k]: busy time of intervals 0..k-1
};

// Per stage, the mean share of the job's other ranks computing while its passes run, by pass (weighted by their
// duration): the stage's other replicas run the same timeline at the same moment, every other stage's replicas
// their own.
std::vector<PassTimes> corunning_shares(const SimulationResult& sim, int replicas) {
  const size_t p = sim.timeline.size();
  const double others = static_cast<double>(p) * replicas - 1;
  std::vector<BusyClock> clocks;
  for (const auto& timeline : sim.timeline) clocks.emplace_back(timeline);
  std::vector<PassTimes> shares(p);
  for (size_t s = 0; s < p; ++s) {
    PassTimes busy, length;
    for (const TimedInstruction& t : sim.timeline[s]) {
      const double d = t.end - t.start;
      if (d <= 0) continue;
      double corunning = (replicas - 1) * d;
      for (size_t q = 0; q < p; ++q) {
        if (q != s) corunning += replicas * (clocks[q].busy_before(t.end) - clocks[q].busy_before(t.start));
      }
      double PassTimes::*pass = kPassTimes[pass_of(t.instruction.op)];
      busy.*pass += corunning;
      length.*pass += d * others;
    }
    for (double PassTimes::*pass : kPassTimes) {
      shares[s].*pass = length.*pass > 0 ? std::clamp(busy.*pass / length.*pass, 0.0, 1.0) : 1.0;
    }
  }
  return shares;
}

const char* yes_no(bool b) { return b ? "yes" : "no"; }

std::string join(const std::vector<int>& values) {
  std::string text;
  for (int v : values) {
    if (!text.empty()) text += ',';
    text += std::to_string(v);
  }
  return text;
}

}  // namespace

double between_alone_and_together(double alone, double together, double share, int ranks, int threads, int cores) {
  if (ranks < 2) return together;
  const double oversubscribed = static_cast<double>(ranks) * threads / std::max(1, cores);
  if (oversubscribed > 1.0 && together >= 0.75 * oversubscribed * alone) {
    const double running = 1.0 + share * (ranks - 1);  // this rank and, on average, the others meanwhile
    const double sliced = std::max(1.0, running * threads / std::max(1, cores));
    const double shared = std::max(1.0, together / (alone * oversubscribed));
    return std::min(together, alone * sliced * (1.0 + (shared - 1.0) * share));
  }
  return alone + (together - alone) * share;
}

std::string Layout::describe() const {
  std::string text = concat(stages, " stage(s) x ", replicas, " replica(s), micro-batch ", micro_batch, " x ",
                            micro_batches, ", ", schedule_kind_name(schedule));
  if (schedule == ScheduleKind::interleaved_1f1b) text += concat(" v=", virtual_stages);
  if (recompute) text += ", recompute";
  if (shard) text += ", sharded optimizer";
  if (stages > 1) text += ", layers " + join(layers_per_stage);
  if (rank_order == RankOrder::stage_major) text += ", ranks stage-major";
  return text;
}

std::vector<std::string> Layout::train_flags() const {
  std::vector<std::string> flags = {"--pipeline-stages", std::to_string(stages), "--micro-batch-size",
                                    std::to_string(micro_batch)};
  const char* name = schedule == ScheduleKind::interleaved_1f1b ? "interleaved" : schedule_kind_name(schedule);
  flags.insert(flags.end(), {"--pipeline-schedule", name});
  if (schedule == ScheduleKind::interleaved_1f1b)
    flags.insert(flags.end(), {"--virtual-stages", std::to_string(virtual_stages)});
  if (stages > 1 && schedule != ScheduleKind::interleaved_1f1b)  // interleaved: train splits its chunks evenly
    flags.insert(flags.end(), {"--layers-per-stage", join(layers_per_stage)});
  if (recompute) flags.push_back("--recompute");
  if (shard) flags.push_back("--shard-optimizer");
  return flags;
}

namespace {

// Calls visit(stages, replicas, micro_batch) for every split of the processes into stages x replicas and of each
// replica's share of the global batch into at least `stages` equal micro-batches that the inputs allow.
template <class Visit>
void for_each_division(const PlanInputs& in, Visit&& visit) {
  const int layers = layers_of(in.config);
  for (int p = 1; p <= std::min(in.processes, layers + 2); ++p) {
    if (in.processes % p != 0 || (in.stages && *in.stages != p)) continue;
    const int replicas = in.processes / p;
    if (in.global_batch % replicas != 0) continue;
    const int64_t per_replica = in.global_batch / replicas;
    for (int64_t b = 1; b <= std::min(per_replica, in.max_micro_batch); ++b) {
      if (per_replica % b != 0 || per_replica / b < p || (in.micro_batch && *in.micro_batch != b)) continue;
      visit(p, replicas, b);
    }
  }
}

}  // namespace

std::vector<int64_t> candidate_micro_batches(const PlanInputs& in) {
  std::vector<int64_t> sizes;
  for_each_division(in, [&](int, int, int64_t b) {
    if (std::find(sizes.begin(), sizes.end(), b) == sizes.end()) sizes.push_back(b);
  });
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

LayoutPrediction predict_layout(const PlanInputs& in, const ModelProfile& profile, Layout layout) {
  const ViTConfig& c = in.config;
  const int p = layout.stages, r = layout.replicas, v = layout.virtual_stages, m = layout.micro_batches;
  const double b = static_cast<double>(layout.micro_batch);
  const int layers = layers_of(c);
  auto parameters = std::make_shared<const ParameterLayout>(c, in.mode.lora);
  const auto trainable = make_trainable_split(parameters, in.mode);
  const int trained = trainable->first_trained_segment;
  // Interleaved chunks are split evenly, as train does (its --layers-per-stage takes one entry per stage).
  const bool interleaved = layout.schedule == ScheduleKind::interleaved_1f1b;
  const std::vector<SegmentRange> pieces = !layout.layers_per_stage.empty() || interleaved
                                               ? split_segments(layers, p * v, layout.layers_per_stage)
                                               : balanced_pieces(profile, c, p * v, b, layout.recompute, trained);
  layout.layers_per_stage = blocks_per_piece(c, pieces);

  // Ranks sharing a node's cores compute more slowly: by the share of a core each gets, beyond what the profile
  // measured (a profile measured by this many ranks at once already holds their sharing).
  const double cores = std::max(1, in.cores_per_node);
  auto core_share = [&](int ranks) {
    return std::max(1.0, static_cast<double>(ranks * in.threads_per_process) / cores);
  };
  // On GPUs each rank computes on its own device: no sharing beyond what the profile holds.
  const double slowdown =
      in.cuda ? 1.0 : core_share(in.processes_per_node) / core_share(std::max(1, profile.corunning_ranks));
  const double hidden_bytes = b * static_cast<double>(c.tokens() * c.hidden_size) * sizeof(float);
  const bool split = schedule_splits_backward(layout.schedule);

  // With times measured alone beside those measured by every rank at once, a pass is costed between the two by the
  // share of the other ranks computing while it runs, which the simulated schedule gives (settled by iterating).
  const bool overlap_costed =
      !in.cuda && p > 1 && in.processes > 1 && profile.has_alone() && profile.measured_together == in.processes;
  std::vector<SimulationCosts> costs(static_cast<size_t>(p)), alone_costs(costs.size());
  // Elements per stage: every value it holds, and the trainable ones (gradients, optimizer state, reductions).
  std::vector<double> stage_values(static_cast<size_t>(p), 0.0), stage_numel(static_cast<size_t>(p), 0.0);
  std::vector<double> stage_forward(static_cast<size_t>(p), 0.0);
  LayoutPrediction out;
  for (int s = 0; s < p; ++s) {
    PassTimes t, alone;
    size_t activations = 0;
    for (int chunk = 0; chunk < v; ++chunk) {
      const SegmentRange& piece = pieces[static_cast<size_t>(chunk * p + s)];
      add(t, piece_times(profile, c, piece.first, piece.last, b, layout.recompute, trained));
      if (overlap_costed) {
        add(alone, piece_times(profile, c, piece.first, piece.last, b, layout.recompute, trained, true));
      }
      stage_values[static_cast<size_t>(s)] +=
          static_cast<double>(parameters->segment_end(piece.last) - parameters->segment_begin(piece.first));
      stage_numel[static_cast<size_t>(s)] += static_cast<double>(trainable->trainable->segment_end(piece.last) -
                                                                 trainable->trainable->segment_begin(piece.first));
      const int slots = activation_slots_needed(layout.schedule, p, m, s, v);
      activations += planned_activation_bytes(c, piece.first, piece.last, in.precision, layout.recompute, split,
                                              layout.micro_batch, slots);
    }
    SimulationCosts& sc = costs[static_cast<size_t>(s)];
    sc.forward = t.forward * slowdown;
    sc.backward = t.backward * slowdown;
    sc.backward_input = t.backward_input * slowdown;
    sc.backward_weight = t.backward_weight * slowdown;
    if (overlap_costed) {
      // Alone can only be faster: a pass measured slower alone (noise) is costed as measured together.
      for (size_t k = 0; k < 4; ++k) {
        alone_costs[static_cast<size_t>(s)].*kPassCosts[k] =
            std::min(sc.*kPassCosts[k], alone.*kPassTimes[k] * slowdown);
      }
    }

    const double n = stage_numel[static_cast<size_t>(s)], values = stage_values[static_cast<size_t>(s)];
    RankMemory mem;
    mem.parameters = 4 * values;
    mem.gradients = 4 * n;
    mem.optimizer = in.optimizer_buffers * 4 * n / (layout.shard ? r : 1);
    mem.gemm_copy = in.precision == Precision::fp32 ? 0.0 : 2 * values;
    mem.activations = static_cast<double>(activations);
    if (in.cuda) mem.overhead = 0;  // host memory; the GPU's context is out of the budget already
    if (s == 0 && !in.cuda) {       // the loader's decoded batch and the one it prepares next (host memory on a GPU)
      mem.loader = 2.0 * static_cast<double>(in.global_batch / r) *
                   static_cast<double>(c.num_channels * c.image_size * c.image_size) * sizeof(float);
    }
    if (in.cuda) mem.cuda = cuda_workspaces(p, v, r, s);
    if (mem.total() > out.memory.total()) out.memory = mem;
  }
  // Across nodes, the traffic that stays inside one (the rank order's choice, plan/rank_placement.h; ranks on the
  // nodes in blocks, as mpirun's --map-by slot puts them) takes the node's shared memory, the rest the link.
  const int nodes = (in.processes + std::max(1, in.processes_per_node) - 1) / std::max(1, in.processes_per_node);
  const LinkModel* pipeline_link = &in.link;
  const LinkModel* reduction_link = &in.link;
  double cross_node_reduction_bytes = 0;  // every stage's ring, link by link (both directions)
  if (nodes > 1) {
    HostTopology topology;
    for (int rank = 0; rank < in.processes; ++rank) topology.host_of_rank.push_back(rank / in.processes_per_node);
    GridTraffic traffic;
    traffic.stages = p;
    traffic.virtual_stages = v;
    traffic.boundary_bytes = 2.0 * m * hidden_bytes;
    for (double n : stage_numel) traffic.gradient_bytes.push_back(4 * n);
    const RankPlacement placement = with_fixed_rank_order(choose_rank_placement(topology, traffic));
    layout.rank_order = placement.order;
    out.cross_node_bytes = placement.chosen.total();
    cross_node_reduction_bytes = placement.chosen.reduction;
    if (in.local_link.bandwidth > 0) {
      if (placement.chosen.pipeline == 0) pipeline_link = &in.local_link;
      if (placement.chosen.reduction == 0) reduction_link = &in.local_link;
    }
  }
  for (SimulationCosts& sc : costs) sc.message_latency = p > 1 ? pipeline_link->transfer_seconds(hidden_bytes) : 0.0;
  const auto schedules = make_all_schedules(layout.schedule, p, m, v);
  if (overlap_costed) {
    std::vector<SimulationCosts> mixed = alone_costs;
    for (size_t s = 0; s < mixed.size(); ++s) mixed[s].message_latency = costs[s].message_latency;
    for (int round = 0; round < 12; ++round) {
      const std::vector<PassTimes> shares = corunning_shares(simulate_schedules(schedules, m, v, mixed), r);
      double change = 0;
      for (size_t s = 0; s < mixed.size(); ++s) {
        for (size_t k = 0; k < 4; ++k) {
          double SimulationCosts::*pass = kPassCosts[k];
          const double target =
              between_alone_and_together(alone_costs[s].*pass, costs[s].*pass, shares[s].*kPassTimes[k], in.processes,
                                         in.threads_per_process, in.cores_per_node);
          const double hi = costs[s].*pass;
          const double next = 0.5 * (mixed[s].*pass + target);  // damped: the shares move with the costs
          change = std::max(change, std::abs(next - mixed[s].*pass) / std::max(hi, 1e-12));
          mixed[s].*pass = next;
        }
      }
      if (change < 1e-3) break;
    }
    costs = mixed;
  }
  for (size_t s = 0; s < costs.size(); ++s) {
    const SimulationCosts& sc = costs[s];
    stage_forward[s] = sc.forward;
    out.stage_passes.push_back({sc.forward, sc.backward, sc.backward_input, sc.backward_weight});
  }
  const SimulationResult sim = simulate_schedules(schedules, m, v, costs);
  out.pipeline_seconds = sim.makespan;
  out.bubble = sim.bubble_fraction;

  const double latency = reduction_link->latency;
  const double bandwidth =
      reduction_link->collective_bandwidth > 0 ? reduction_link->collective_bandwidth : reduction_link->bandwidth;
  // MPI moves a reduction forward only inside its calls, and on one node the copies and sums are CPU work: with
  // every core already computing, nothing of it hides behind the backward pass or the next forward.
  // On GPUs NCCL reduces on the device's communication stream, beside the backward pass.
  const bool no_core_to_spare = !in.cuda && in.processes_per_node * in.threads_per_process >= in.cores_per_node;
  const double share = r > 1 ? static_cast<double>(r - 1) / r : 0.0;
  // Every stage's ring that crosses between nodes goes through the same network interfaces at about the same time:
  // each node's share of those bytes at the link's rate bounds every stage's reduction (2 stages x 2 replicas on 2
  // nodes, replicas across: both stages' rings share one link, twice one ring's time).
  const double through_interfaces =
      reduction_link == &in.link && nodes > 1 ? cross_node_reduction_bytes / nodes / bandwidth : 0.0;
  double step = 0;
  for (int s = 0; s < p; ++s) {
    const auto& timeline = sim.timeline[static_cast<size_t>(s)];
    double finish = 0, last_backward = 0;
    for (const TimedInstruction& t : timeline) {
      if (t.end > t.start) {
        finish = std::max(finish, t.end);
        if (t.instruction.op != Op::forward) last_backward = t.end - t.start;
      }
    }
    const double bytes = 4 * stage_numel[static_cast<size_t>(s)];
    const double buckets = std::max(1.0, std::ceil(bytes / kBucketBytes)) + (layout.shard ? r - 1 : 0);
    double exposed = 0;
    if (r > 1) {
      // Ring algorithms: an all-reduce moves 2 (r-1)/r of the buffer over each link, a reduce-scatter or an
      // all-gather (r-1)/r. The reduction overlaps the last backward; the gather the next step's first forward.
      const double on_the_wire = std::max((layout.shard ? 1.0 : 2.0) * share * bytes / bandwidth,
                                          (layout.shard ? 0.5 : 1.0) * through_interfaces);
      const double reduce = on_the_wire + (layout.shard ? 1.0 : 2.0) * (r - 1) * latency;
      exposed += no_core_to_spare ? reduce : std::max(reduce / buckets, reduce - last_backward);
      if (layout.shard) {
        const double gather = std::max(share * bytes / bandwidth, 0.5 * through_interfaces) + (r - 1) * latency;
        exposed +=
            no_core_to_spare ? gather : std::max(gather / buckets, gather - stage_forward[static_cast<size_t>(s)]);
      }
    }
    const auto cost = profile.optimizer_seconds_per_element.find(in.optimizer);
    const double per_element = cost == profile.optimizer_seconds_per_element.end() ? 0.0 : cost->second;
    const double optimizer = per_element * stage_numel[static_cast<size_t>(s)] / (layout.shard ? r : 1) * slowdown;
    out.exposed_communication_seconds = std::max(out.exposed_communication_seconds, exposed);
    out.optimizer_seconds = std::max(out.optimizer_seconds, optimizer);
    step = std::max(step, finish + exposed + optimizer);
  }
  // The gradient norm and the loss: two small all-reduces over the job.
  const double hops = in.processes > 1 ? std::ceil(std::log2(static_cast<double>(in.processes))) : 0.0;
  step += 2 * hops * latency;
  // The data path: each first-stage rank loads its replica's share of the batch, ahead of the step.
  if (in.data_seconds_per_image > 0) {
    const double per_loader = in.data_seconds_per_image * static_cast<double>(in.global_batch / r);
    // On GPUs a rank's host thread only launches kernels: one busy thread each.
    const int busy_threads = in.processes_per_node * (in.cuda ? 1 : in.threads_per_process);
    if (busy_threads >= in.cores_per_node) {
      // No core to spare: the node's loading (its first-stage ranks' share) is time-sliced into the compute.
      const double loaders_on_node = std::max(1.0, static_cast<double>(in.processes_per_node) / p);
      out.data_seconds = loaders_on_node * per_loader / cores;
    } else {
      const double threads = std::max(1, std::min(in.loader_threads, in.cores_per_node - busy_threads));
      out.data_seconds = std::max(0.0, per_loader / threads - step);
    }
  }
  out.step_seconds = step + out.data_seconds;

  StepVolume& vol = out.volume;
  const int boundaries = p * v - 1;
  const double label_bytes =
      b * ((c.problem_type == ProblemType::multi_label ? 4.0 * static_cast<double>(c.num_labels()) : 8.0) + 8.0);
  vol.activations = static_cast<double>(r) * m * boundaries * hidden_bytes;
  vol.activation_grads = vol.activations;
  vol.labels = boundaries > 0 ? static_cast<double>(r) * m * label_bytes : 0.0;
  double model_bytes = 0;
  for (double n : stage_numel) model_bytes += 4 * n;
  if (r > 1) {
    const double payload = static_cast<double>(r) * model_bytes;
    (layout.shard ? vol.reduce_scatter : vol.allreduce) = payload;
    if (layout.shard) vol.allgather = payload;
  }
  vol.wire = vol.activations + vol.activation_grads + vol.labels + 2 * share * static_cast<double>(r) * model_bytes;
  out.layout = std::move(layout);
  out.fits = out.memory.total() <= in.memory_per_process;
  return out;
}

Plan plan_layouts(const PlanInputs& in, const ModelProfile& profile) {
  Plan plan;
  const int layers = layers_of(in.config);
  for_each_division(in, [&](int p, int r, int64_t b) {
    const int m = static_cast<int>(in.global_batch / r / b);
    std::vector<std::pair<ScheduleKind, int>> schedules = {{ScheduleKind::one_f_one_b, 1}};
    if (p > 1) {
      schedules.push_back({ScheduleKind::gpipe, 1});
      schedules.push_back({ScheduleKind::zero_bubble_h1, 1});
      if (m % p == 0 && 2 * p <= layers + 2) schedules.push_back({ScheduleKind::interleaved_1f1b, 2});
    }
    for (auto [schedule, v] : schedules) {
      if (in.schedule && *in.schedule != schedule) continue;
      if (in.virtual_stages && schedule == ScheduleKind::interleaved_1f1b) v = *in.virtual_stages;
      if (schedule == ScheduleKind::interleaved_1f1b && (m % p != 0 || p * v > layers + 2)) continue;
      for (bool recompute : {false, true}) {
        if ((in.recompute && *in.recompute != recompute) || (recompute && schedule == ScheduleKind::zero_bubble_h1)) {
          continue;
        }
        for (bool shard : {false, true}) {
          if ((in.shard && *in.shard != shard) || (shard && (r == 1 || in.optimizer_buffers == 0))) continue;
          Layout layout;
          layout.stages = p;
          layout.replicas = r;
          layout.micro_batch = b;
          layout.micro_batches = m;
          layout.schedule = schedule;
          layout.virtual_stages = v;
          layout.recompute = recompute;
          layout.shard = shard;
          if (static_cast<int>(in.layers_per_stage.size()) == p * v) layout.layers_per_stage = in.layers_per_stage;
          LayoutPrediction prediction = predict_layout(in, profile, layout);
          ++plan.searched;
          if (!plan.least_memory || prediction.memory.total() < plan.least_memory->memory.total()) {
            plan.least_memory = prediction;
          }
          if (prediction.fits) plan.ranked.push_back(std::move(prediction));
        }
      }
    }
  });
  std::stable_sort(plan.ranked.begin(), plan.ranked.end(), [](const LayoutPrediction& a, const LayoutPrediction& b) {
    if (a.step_seconds != b.step_seconds) return a.step_seconds < b.step_seconds;
    return a.memory.total() < b.memory.total();
  });
  return plan;
}

std::string what_would_fit(const PlanInputs& in, const ModelProfile& profile, const Plan& plan) {
  std::string text;
  if (plan.least_memory) {
    text = concat("the layout needing the least memory (", plan.least_memory->layout.describe(), ") needs ",
                  format_bytes(plan.least_memory->memory.total()), " per process");
  } else {
    text = concat("no layout of ", in.processes, " process(es) divides the global batch of ", in.global_batch);
  }
  for (int n = in.processes + 1; n <= 64 * in.processes; ++n) {
    PlanInputs more = in;
    more.processes = n;
    more.processes_per_node = std::max(in.processes_per_node, 1) * n / std::max(in.processes, 1);
    // On GPUs a node takes no more ranks than it has GPUs: more processes are more nodes.
    if (in.cuda && in.gpus_per_node > 0) more.processes_per_node = std::min(more.processes_per_node, in.gpus_per_node);
    if (candidate_micro_batches(more).empty()) continue;
    const Plan larger = plan_layouts(more, profile);
    if (!larger.ranked.empty()) {
      text += concat("; with ", n, " processes it would fit (", larger.ranked.front().layout.describe(), ", ",
                     format_bytes(larger.ranked.front().memory.total()), " per process)");
      return text;
    }
  }
  return text + concat("; no layout of up to ", 64 * in.processes, " processes fits either");
}

nlohmann::json prediction_json(const LayoutPrediction& x) {
  const Layout& l = x.layout;
  return {{"stages", l.stages},
          {"replicas", l.replicas},
          {"micro_batch", l.micro_batch},
          {"micro_batches", l.micro_batches},
          {"schedule", schedule_kind_name(l.schedule)},
          {"virtual_stages", l.virtual_stages},
          {"recompute", l.recompute},
          {"shard_optimizer", l.shard},
          {"layers_per_stage", l.layers_per_stage},
          {"rank_order", rank_order_name(l.rank_order)},
          {"cross_node_bytes_per_step", x.cross_node_bytes},
          {"train_flags", l.train_flags()},
          {"step_seconds", x.step_seconds},
          {"pipeline_seconds", x.pipeline_seconds},
          {"bubble", x.bubble},
          {"exposed_communication_seconds", x.exposed_communication_seconds},
          {"optimizer_seconds", x.optimizer_seconds},
          {"data_seconds", x.data_seconds},
          {"memory_per_rank_bytes", x.memory.total()},
          {"memory",
           {{"parameters", x.memory.parameters},
            {"gradients", x.memory.gradients},
            {"optimizer", x.memory.optimizer},
            {"gemm_copy", x.memory.gemm_copy},
            {"activations", x.memory.activations},
            {"loader", x.memory.loader},
            {"overhead", x.memory.overhead},
            {"cuda_workspaces",
             {{"cublaslt", x.memory.cuda.cublaslt},
              {"cudnn", x.memory.cuda.cudnn},
              {"arena", x.memory.cuda.arena},
              {"nccl", x.memory.cuda.nccl}}}}},
          {"bytes_per_step",
           {{"activations", x.volume.activations},
            {"activation_grads", x.volume.activation_grads},
            {"labels", x.volume.labels},
            {"allreduce", x.volume.allreduce},
            {"reduce_scatter", x.volume.reduce_scatter},
            {"allgather", x.volume.allgather},
            {"wire", x.volume.wire}}},
          {"fits", x.fits}};
}

nlohmann::json plan_json(const PlanInputs& in, const Plan& plan, int rows) {
  nlohmann::json j;
  j["processes"] = in.processes;
  j["processes_per_node"] = in.processes_per_node;
  j["threads_per_process"] = in.threads_per_process;
  j["memory_per_process_bytes"] = in.memory_per_process;
  j["device"] = in.cuda ? "cuda" : "cpu";
  if (!in.memory_source.empty()) j["memory_source"] = in.memory_source;
  if (in.cuda) j["gpus_per_node"] = in.gpus_per_node;
  if (in.gpu_memory) {
    j["gpu_memory"] = {{"free_bytes", in.gpu_memory->free_bytes},
                       {"total_bytes", in.gpu_memory->total_bytes},
                       {"margin_bytes", in.gpu_memory->margin_bytes},
                       {"budget_bytes", in.gpu_memory->budget()},
                       {"devices", in.gpu_memory->devices}};
  }
  j["link"] = {{"bandwidth_bytes_per_s", in.link.bandwidth},
               {"collective_bandwidth_bytes_per_s", in.link.collective_bandwidth},
               {"latency_s", in.link.latency},
               {"source", in.link.source}};
  if (in.local_link.bandwidth > 0) {
    j["local_link"] = {{"bandwidth_bytes_per_s", in.local_link.bandwidth},
                       {"collective_bandwidth_bytes_per_s", in.local_link.collective_bandwidth},
                       {"latency_s", in.local_link.latency},
                       {"source", in.local_link.source}};
  }
  j["global_batch"] = in.global_batch;
  j["searched"] = plan.searched;
  j["layouts"] = nlohmann::json::array();
  for (int i = 0; i < std::min<int>(rows, static_cast<int>(plan.ranked.size())); ++i) {
    j["layouts"].push_back(prediction_json(plan.ranked[static_cast<size_t>(i)]));
  }
  if (plan.least_memory) j["least_memory"] = prediction_json(*plan.least_memory);
  return j;
}

std::string format_plan(const PlanInputs& in, const Plan& plan, int rows) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line), "%-3s %-8s %-12s %-18s %-9s %-7s %-16s %10s %7s %12s %12s\n", "#", "P x R",
                "micro-batch", "schedule", "recompute", "sharded", "layers/stage", "step time", "bubble", "memory/rank",
                "bytes/step");
  out += line;
  for (int i = 0; i < std::min<int>(rows, static_cast<int>(plan.ranked.size())); ++i) {
    const LayoutPrediction& x = plan.ranked[static_cast<size_t>(i)];
    const Layout& l = x.layout;
    std::string schedule = schedule_kind_name(l.schedule);
    if (l.schedule == ScheduleKind::interleaved_1f1b) schedule += concat(" v=", l.virtual_stages);
    std::snprintf(line, sizeof(line), "%-3d %-8s %-12s %-18s %-9s %-7s %-16s %9.3fs %6.1f%% %12s %12s\n", i + 1,
                  concat(l.stages, " x ", l.replicas).c_str(), concat(l.micro_batch, " x ", l.micro_batches).c_str(),
                  schedule.c_str(), yes_no(l.recompute), yes_no(l.shard),
                  (l.stages > 1 ? join(l.layers_per_stage) : std::string("-")).c_str(), x.step_seconds, 100 * x.bubble,
                  format_bytes(x.memory.total()).c_str(), format_bytes(x.volume.wire).c_str());
    out += line;
  }
  (void)in;
  return out;
}

}  // namespace vitpipe
