#include "train/layout_auto.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "backend/device_selection.h"
#include "io/hf_config.h"
#include "io/model_reference.h"
#include "parallel/launch_environment.h"
#include "parallel/mpi_communicator.h"
#include "plan/gpu_memory_budget.h"
#include "train/grad_clip.h"
#include "train/optimizer.h"
#include "train/run_world.h"
#include "util/error.h"
#include "util/log.h"
#include "util/progress.h"
#include "util/threads.h"

namespace vitpipe {
namespace {

constexpr int kLayoutTag = 31500;   // rank 0 -> every rank: the chosen layout (size, then JSON text)
constexpr int kProfileTag = 31501;  // rank 0 -> every rank: what to profile alongside it (size, then JSON text)
constexpr int kAloneTag = 31502;    // rank 0 -> every rank: the times it measured alone (size, then JSON text)

Layout layout_from_json(const nlohmann::json& j) {
  Layout l;
  l.stages = j.at("stages").get<int>();
  l.replicas = j.at("replicas").get<int>();
  l.micro_batch = j.at("micro_batch").get<int64_t>();
  l.micro_batches = j.at("micro_batches").get<int>();
  l.schedule = parse_schedule_kind(j.at("schedule").get<std::string>());
  l.virtual_stages = j.at("virtual_stages").get<int>();
  l.recompute = j.at("recompute").get<bool>();
  l.shard = j.at("shard_optimizer").get<bool>();
  l.layers_per_stage = j.at("layers_per_stage").get<std::vector<int>>();
  return l;
}

// The other ranks wait for rank 0's plan by polling a receive with sleeps: a blocking MPI call would spin and take
// the cores rank 0 is profiling on.
std::string receive_politely(Communicator& world, int tag) {
  int64_t size = 0;
  CommRequest request = world.irecv_bytes(&size, sizeof(size), 0, tag);
  while (!request.test()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::string text(static_cast<size_t>(size), '\0');
  world.irecv_bytes(text.data(), text.size(), 0, tag).wait();
  return text;
}

void send_to_every_rank(Communicator& world, const std::string& text, int tag) {
  const int64_t size = static_cast<int64_t>(text.size());
  std::vector<CommRequest> sends;
  for (int r = 1; r < world.size(); ++r) {
    sends.push_back(world.isend_bytes(&size, sizeof(size), r, tag));
    sends.push_back(world.isend_bytes(text.data(), text.size(), r, tag));
  }
  wait_all(sends);
}

std::string format_seconds_short(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", value);
  return text;
}

std::string plan_text(const PlanInputs& in, const Plan& plan, bool profiled, const std::string& cache,
                      const ModelProfile* profile = nullptr) {
  const std::string data = in.data_seconds_per_image > 0
                               ? concat("; data path ", format_seconds_short(in.data_seconds_per_image * 1e3),
                                        " ms per image, ", in.loader_threads, " loader thread(s)")
                               : std::string();
  if (in.cuda) {
    std::string gpu = "GPU";
    if (profile && profile->describe.contains("gpu")) {
      const nlohmann::json& g = profile->describe.at("gpu");
      gpu = concat(g.value("name", std::string("GPU")), " (sm ", g.value("compute_capability", std::string("?")), ", ",
                   format_bytes(g.value("memory_bytes", 0.0)), ")");
    }
    const std::string local = in.local_link.bandwidth > 0 ? "; within a node " + in.local_link.describe() : "";
    return concat("plan: --device cuda, ", in.processes, " process(es), ", in.processes_per_node, " per node of ",
                  in.gpus_per_node, " GPU(s), each on its own ", gpu, "; ", format_bytes(in.memory_per_process),
                  " of device memory per process (", in.memory_source, "), global batch ", in.global_batch, "; link ",
                  in.link.describe(), local, data, "; profile ", profiled ? "measured now" : "from the cache", " (",
                  cache, "); ", plan.searched, " layouts searched, ", plan.ranked.size(), " fit\n",
                  format_plan(in, plan, 6));
  }
  return concat("plan: ", in.processes, " process(es), ", in.processes_per_node, " per node of ", in.cores_per_node,
                " core(s), ", in.threads_per_process, " thread(s) each, ", format_bytes(in.memory_per_process),
                " per process, global batch ", in.global_batch, "; link ", in.link.describe(), data, "; profile ",
                profiled ? "measured now" : "from the cache", " (", cache, "); ", plan.searched, " layouts searched, ",
                plan.ranked.size(), " fit\n", format_plan(in, plan, 6));
}

ProfileRequest profile_request(const PlanInputs& in, const TrainOptions& o) {
  ProfileRequest request;
  request.config = in.config;
  request.precision = in.precision;
  request.mode = in.mode;
  request.threads = in.threads_per_process;
  request.micro_batches = candidate_micro_batches(in);
  VP_REQUIRE(!request.micro_batches.empty(), "no layout of ", in.processes, " process(es) can run a global batch of ",
             in.global_batch,
             " (--batch-size must be divisible by the data-parallel replicas and give every stage a "
             "micro-batch): change --batch-size or the process count");
  request.cache_dir = o.profile_cache.empty() ? default_profile_cache() : std::filesystem::path(o.profile_cache);
  if (in.cuda) {
    request.device = Device::cuda;
    request.allow_tf32 = o.allow_tf32;
    request.gpu = describe_profile_gpu();
  }
  return request;
}

// The optimizer timer of segment_profile.h for the device the plan is for.
OptimizerTimer optimizer_timer(const PlanInputs& in, const TrainOptions& o) {
  if (!in.cuda) return [](const std::shared_ptr<const ParameterLayout>& layout) { return time_optimizers(layout); };
  return [allow_tf32 = o.allow_tf32](const std::shared_ptr<const ParameterLayout>& layout) {
    const std::unique_ptr<Backend> gpu = make_backend(Device::cuda, allow_tf32);
    return time_optimizers(layout, gpu.get());
  };
}

std::string cache_dir_of(const TrainOptions& o) {
  return (o.profile_cache.empty() ? default_profile_cache() : std::filesystem::path(o.profile_cache)).string();
}

// The cores the job's ranks may run on, together: the union of their affinity masks (mpirun binds each of 2
// ranks to a core of its own, 4 ranks on 2 cores to both). Nodes are taken to be alike.
int cores_of_the_job(Communicator& world) {
  const int cpus = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<double> mine(static_cast<size_t>(cpus), 0.0);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < cpus; ++c) mine[static_cast<size_t>(c)] = CPU_ISSET(c, &set) ? 1.0 : 0.0;
  } else {
    std::fill(mine.begin(), mine.end(), 1.0);
  }
  world.allreduce(mine.data(), mine.size(), ReduceOp::max);
  return std::max(1, static_cast<int>(std::count(mine.begin(), mine.end(), 1.0)));
}

// Collective over `world`: without --link, the gradient reduction as this MPI library runs it here, one bucket (at
// most 25 MiB) reduced to its owners. With --link the line rate stands: measured over a link that has just been
// idle, the same 2-host reduction measured 0.48 to 0.94 Gbit/s from one run to the next at 1 Gbit/s.
void measure_reduction(Communicator& world, const TrainOptions& o, const ViTConfig& config, LinkModel& link) {
  if (world.size() < 2 || !o.link.empty()) return;
  const TrainingMode mode = o.training_mode();
  const auto split = make_trainable_split(std::make_shared<const ParameterLayout>(config, mode.lora), mode);
  link.collective_bandwidth = measure_collective_bandwidth(
      world, std::min<size_t>(size_t{25} << 20, static_cast<size_t>(split->trainable->numel()) * sizeof(float)));
}

// Collective over `world`, with --link and ranks on several hosts: the line rate is what the link carries, not what
// the trainer's reduction gets through MPI's TCP transport. Hosts are paired (0 with 1, 2 with 3, ...), one rank of
// each, and every pair runs the trainer's ring at once (measure_ring_rate); the slowest pair's payload rate becomes
// the link's collective rate. At 100 Mbit/s the rings of 2 x 1 and 4 x 1 namespaced hosts carried 85-88% of it,
// where plain TCP streams carried 92-96%.
void measure_reduction_across_hosts(Communicator& world, const HostTopology& topology, const TrainOptions& o,
                                    LinkModel& link) {
  if (world.size() < 2 || topology.hosts() < 2 || o.link.empty()) return;
  const int me = world.rank();
  const int host = topology.host_of_rank.at(static_cast<size_t>(me));
  const int partner = (host ^ 1) < topology.hosts() ? host ^ 1 : -1;
  bool first_on_host = true;
  for (int r = 0; r < me; ++r) first_on_host = first_on_host && !topology.same_host(r, me);
  const int color = first_on_host && partner >= 0 ? std::min(host, partner) : -1;
  const std::unique_ptr<Communicator> pair = world.split(color, me);
  double rate = pair ? measure_ring_rate(*pair, link.bandwidth) : 1e30;
  world.allreduce(&rate, 1, ReduceOp::min);
  if (rate < 1e30) link.collective_bandwidth = std::min(rate, link.bandwidth);
}

// Collective over `world`, when its ranks span hosts and some host holds several: the ranks of each host reduce a
// bucket among themselves, every host at once, as the trainer's reductions inside a host run (through MPI's shared
// memory, the other ranks of the host polling in MPI's progress loop on the same cores); the slowest host's rate
// becomes the local link's collective rate. A copy between two threads (measure_local_link) costed the 2 x 2
// stage-major reduction of 2 namespaced hosts on 2 cores at 0.02-0.05 s a step; it was 0.16-0.29 s exposed.
// Collective over `world`: on GPUs each rank read its own GPU's free memory; the plan takes the least.
void least_gpu_memory_of_the_ranks(Communicator& world, const TrainOptions& o, PlanInputs& in) {
  if (!in.cuda || !o.memory_per_process.empty() || world.size() < 2) return;
  double budget = in.memory_per_process;
  world.allreduce(&budget, 1, ReduceOp::min);
  if (budget < in.memory_per_process) {
    in.memory_per_process = budget;
    in.memory_source += "; another rank's GPU has less: " + format_bytes(budget);
  }
}

void measure_reduction_inside_hosts(Communicator& world, const HostTopology& topology, const TrainOptions& o,
                                    const ViTConfig& config, PlanInputs& in) {
  // On GPUs the link within a node is NCCL's, which this MPI reduction does not measure: the assumption stands.
  if (world.size() < 2 || topology.hosts() < 2 || in.local_link.bandwidth <= 0 || in.cuda) return;
  const int host = topology.host_of_rank.at(static_cast<size_t>(world.rank()));
  const std::unique_ptr<Communicator> on_host = world.split(host, world.rank());
  const TrainingMode mode = o.training_mode();
  const auto split = make_trainable_split(std::make_shared<const ParameterLayout>(config, mode.lora), mode);
  const size_t bytes =
      std::min<size_t>(size_t{25} << 20, static_cast<size_t>(split->trainable->numel()) * sizeof(float));
  double rate = on_host->size() > 1 ? measure_collective_bandwidth(*on_host, bytes) : 1e30;
  world.allreduce(&rate, 1, ReduceOp::min);
  if (rate < 1e30) in.local_link.collective_bandwidth = rate;
}

}  // namespace

double parse_memory_size(std::string_view text, const std::string& where) {
  double value = 0.0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  auto [stop, error] = std::from_chars(begin, end, value);
  VP_REQUIRE(error == std::errc() && stop != begin && std::isfinite(value) && value > 0, where, ": '", text,
             "' is not a memory size (expected e.g. 16GiB, 512MiB, 1.5GB)");
  const std::string_view unit(stop, static_cast<size_t>(end - stop));
  static const std::vector<std::pair<std::string_view, double>> units = {{"", 1.0},
                                                                         {"B", 1.0},
                                                                         {"K", 1024.0},
                                                                         {"KiB", 1024.0},
                                                                         {"KB", 1e3},
                                                                         {"M", 1048576.0},
                                                                         {"MiB", 1048576.0},
                                                                         {"MB", 1e6},
                                                                         {"G", 1073741824.0},
                                                                         {"GiB", 1073741824.0},
                                                                         {"GB", 1e9},
                                                                         {"T", 1099511627776.0},
                                                                         {"TiB", 1099511627776.0},
                                                                         {"TB", 1e12}};
  for (const auto& [name, factor] : units) {
    if (unit == name) return value * factor;
  }
  fail(where, ": unknown unit '", unit, "' in '", text, "' (expected B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
}

double machine_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key >> kib) {
    if (key == "MemTotal:") return kib * 1024;
    std::string rest;
    std::getline(in, rest);
  }
  return 8.0 * 1073741824.0;  // not Linux: a guess, said as such by the plan's printout of the inputs
}

std::map<std::string, double> time_optimizers(const std::shared_ptr<const ParameterLayout>& layout, Backend* backend) {
  std::map<std::string, double> cost;
  FlatParameters params(layout, 1, 1, backend), grads(layout, 1, 1, backend);
  {
    FlatParameters host_params(layout, 1, 1), host_grads(layout, 1, 1);
    for (int64_t i = 0; i < params.numel(); ++i) {
      host_params.data()[i] = 0.01f * static_cast<float>(i % 13);
      host_grads.data()[i] = 1e-4f * static_cast<float>(i % 7);
    }
    if (backend) {
      backend->copy_from_host(host_params.flat(), params.flat());
      backend->copy_from_host(host_grads.flat(), grads.flat());
    } else {
      params = std::move(host_params);
      grads = std::move(host_grads);
    }
  }
  for (const char* name : {"adamw", "lamb", "sgd"}) {
    OptimizerConfig config = optimizer_config_named(name);
    if (config.kind == OptimizerKind::sgd) config.momentum = 0.9;
    auto optimizer = make_optimizer(config, params, {}, backend);
    double best = 1e30;
    for (int run = 0; run < 3; ++run) {
      // The optimizer phase as the trainer runs it: the gradient norm's pass, the update, the gradients zeroed for
      // the next step. Each streams the buffers through memory; the update alone left the other two unpredicted.
      const auto start = std::chrono::steady_clock::now();
      volatile double norm = backend ? sum_of_squares(*backend, grads, grads.begin(), grads.begin() + grads.numel())
                                     : sum_of_squares(grads);
      (void)norm;
      optimizer->step(params, grads, 1e-6);
      if (backend) {
        backend->zero(grads.flat());
        to_host(*backend, params.flat().slice(0, 1));  // waits for the device: its ops return once enqueued
      } else {
        grads.flat().fill_zero();
      }
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (run > 0) best = std::min(best, t);
    }
    cost[name] = best / static_cast<double>(params.numel());
  }
  return cost;
}

ViTConfig model_config_for_plan(const TrainOptions& o) {
  VP_REQUIRE(!o.model.empty(), "--model is required (a model directory or a Hugging Face repo id)");
  const auto directory = resolve_model_reference(o.model);
  ViTConfig config = read_hf_config(directory / "config.json").config;
  if (o.image_size > 0) {
    VP_REQUIRE(o.image_size % config.patch_size == 0, "--image-size ", o.image_size,
               " is not a multiple of the model's patch size ", config.patch_size);
    config.image_size = o.image_size;
  }
  if (config.labels.empty()) config.labels.assign(14, "label");  // a backbone: ChestX-ray14's 14 findings
  return config;
}

PlanInputs plan_inputs(const TrainOptions& o, const ViTConfig& config, const PlanJob& job, const LinkModel& link,
                       bool constrained) {
  PlanInputs in;
  in.config = config;
  in.precision = o.precision == DType::bf16 ? Precision::bf16 : Precision::fp32;
  in.mode = o.training_mode();
  in.global_batch = o.batch_size;
  in.processes = job.processes;
  in.processes_per_node = job.processes_per_node();
  in.cores_per_node = std::max(1, available_cores());
  in.loader_threads = o.loader_threads;
  // As the run will take them (train/run_world.h): --threads, else Slurm's CPUs per task, else the node's share.
  in.threads_per_process = o.threads > 0 ? o.threads
                           : launch_environment().cpus_per_task > 0
                               ? launch_environment().cpus_per_task
                               : std::max(1, in.cores_per_node / in.processes_per_node);
  in.memory_per_process = o.memory_per_process.empty()
                              ? machine_memory_bytes() / in.processes_per_node
                              : parse_memory_size(o.memory_per_process, "--memory-per-process");
  in.link = link;
  // --device cuda (or auto with a GPU; a cuda that cannot run was refused before): every rank on a GPU of its own.
  in.cuda = parse_device_choice(o.device) != DeviceChoice::cpu && cuda_status().usable();
  if (in.cuda) {
    in.gpus_per_node = std::max(1, cuda_status().runtime_devices);
    VP_REQUIRE(in.processes_per_node <= in.gpus_per_node, "--device cuda: ", in.processes_per_node,
               " process(es) per node for ", in.gpus_per_node,
               " GPU(s) per node: two ranks would share a GPU (NCCL refuses that); plan at most ", in.gpus_per_node,
               " process(es) per node (--processes, --nodes)");
    if (o.memory_per_process.empty()) {
      // Under mpirun this rank's GPU (the caller takes the least over the ranks); else the GPUs the node's ranks take.
      std::vector<int> gpus;
      if (launched_as_mpi_job()) {
        gpus.push_back(local_gpu_index());
      } else {
        for (int g = 0; g < in.processes_per_node; ++g) gpus.push_back(g);
      }
      const GpuMemoryBudget budget = query_gpu_memory_budget(gpus);
      in.memory_per_process = budget.budget();
      in.memory_source = budget.describe();
      in.gpu_memory = budget;
    } else {
      in.memory_source = "--memory-per-process, of device memory";
    }
    if (o.link.empty()) {
      // Nothing measured NCCL between this node's GPUs: the labelled assumption (across nodes, the measured link).
      if (job.nodes > 1) {
        in.local_link = assumed_gpu_link();
      } else {
        in.link = assumed_gpu_link();
      }
    }
  }
  // Ranks of one node talk through its shared memory: the same copy as two threads here.
  if (!in.cuda && job.nodes > 1 && in.processes_per_node > 1) in.local_link = measure_local_link();
  const OptimizerConfig optimizer = o.optimizer_config();
  in.optimizer = optimizer.kind == OptimizerKind::adamw  ? "adamw"
                 : optimizer.kind == OptimizerKind::lamb ? "lamb"
                                                         : "sgd";
  in.optimizer_buffers = optimizer.kind == OptimizerKind::sgd ? (optimizer.momentum != 0 ? 1 : 0) : 2;
  if (constrained) {
    auto given = [&](const char* name) {
      const auto& names = o.layout_options_given.names;
      return std::find(names.begin(), names.end(), name) != names.end();
    };
    if (given("pipeline-stages")) in.stages = o.pipeline_stages;
    if (given("micro-batch-size") && o.micro_batch_size) in.micro_batch = *o.micro_batch_size;
    if (given("pipeline-schedule")) in.schedule = parse_schedule_kind(o.pipeline_schedule);
    if (given("virtual-stages")) in.virtual_stages = o.virtual_stages;
    if (given("recompute")) in.recompute = o.recompute;
    if (given("shard-optimizer")) in.shard = o.shard_optimizer;
    if (given("layers-per-stage")) in.layers_per_stage = o.layers_per_stage;
  }
  return in;
}

Plan make_plan(const PlanInputs& in, const TrainOptions& o, bool* profiled, int corunning_ranks, int together,
               const std::function<void(const ProfileWork&)>& work_known, const ProfileCombine& combine,
               const AloneTurn& alone, ModelProfile* profile_out) {
  ProfileRequest request = profile_request(in, o);
  request.corunning_ranks = corunning_ranks;
  request.measured_together = together;
  const ModelProfile profile =
      load_or_measure_profile(request, optimizer_timer(in, o), profiled, work_known, combine, alone);
  if (profile_out) *profile_out = profile;
  Plan plan = plan_layouts(in, profile);
  if (plan.ranked.empty()) {
    fail("no layout of ", in.processes, " process(es) fits ", format_bytes(in.memory_per_process), " per process (",
         in.cuda ? "device memory: " + in.memory_source : std::string("--memory-per-process"), ") for this model (",
         in.config.num_hidden_layers, " layers, hidden ", in.config.hidden_size, ", ", in.config.image_size,
         " px) at global batch ", in.global_batch, ": ", what_would_fit(in, profile, plan));
  }
  return plan;
}

std::optional<ScaledNodeSplit> node_split_from_scaling(const TrainOptions& o, const ViTConfig& config, int cores,
                                                       bool constrained) {
  std::optional<CoreScalingSource> found = find_core_scaling(o.scaling, cache_dir_of(o));
  if (!found) return std::nullopt;
  const auto fits = [&](int ranks, int threads) {
    PlanJob job;
    job.processes = ranks;
    PlanInputs in = plan_inputs(o, config, job, LinkModel{1e12, 0.0, 0.0, "one node"}, constrained);
    in.threads_per_process = threads;
    in.cores_per_node = cores;
    return some_layout_fits_memory(in);
  };
  const std::string memory = o.memory_per_process.empty()
                                 ? concat(format_bytes(machine_memory_bytes()), " of this machine shared by the ranks")
                                 : concat("--memory-per-process ", o.memory_per_process);
  ScaledNodeSplit split;
  split.choice = choose_node_split(found->scaling, cores, fits, memory);
  split.source = found->path;
  return split;
}

std::optional<Plan> make_plan_alongside(Communicator& world, const PlanInputs& in, const TrainOptions& o,
                                        int corunning_ranks, bool* profiled, ModelProfile* profile_out) {
  // Every rank profiles at the same time as rank 0 (the slowest rank's times kept), so the profile holds what
  // sharing the machine's cores and memory bandwidth with the other ranks costs, as training will.
  const ProfileCombine combine = [&](std::vector<double>& values) {
    world.allreduce(values.data(), values.size(), ReduceOp::max);
  };
  // First rank 0 measures alone while the others sleep, so the planner also knows each pass uncontended.
  AloneTurn alone;
  alone.measures = world.rank() == 0;
  alone.share = [&](std::vector<double>& values) {
    if (world.rank() == 0) {
      send_to_every_rank(world, nlohmann::json(values).dump(), kAloneTag);
    } else {
      values = nlohmann::json::parse(receive_politely(world, kAloneTag)).get<std::vector<double>>();
    }
  };
  // On GPUs each rank measures on its own device: nothing shared to tell apart, no turn alone.
  if (world.size() == 1 || in.cuda) alone = {};
  if (world.rank() == 0) {
    const auto work_known = [&](const ProfileWork& work) {
      send_to_every_rank(world,
                         nlohmann::json{{"micro_batches", work.micro_batches}, {"optimizers", work.optimizers}}.dump(),
                         kProfileTag);
    };
    return make_plan(in, o, profiled, corunning_ranks, world.size(), work_known,
                     world.size() > 1 ? combine : ProfileCombine{}, alone, profile_out);
  }
  const nlohmann::json asked = nlohmann::json::parse(receive_politely(world, kProfileTag));
  ProfileWork work;
  work.micro_batches = asked.at("micro_batches").get<std::vector<int64_t>>();
  work.optimizers = asked.at("optimizers").get<bool>();
  if (!work.empty()) {
    ProfileRequest request = profile_request(in, o);
    request.corunning_ranks = corunning_ranks;
    request.measured_together = world.size();
    measure_profile_work(request, work, optimizer_timer(in, o), combine, alone);
  }
  return std::nullopt;
}

namespace {

// Under mpirun or srun the ranks are the job's: what a core-scaling profile prefers for a node is said, for the next
// submission, and never stops the run.
void say_preferred_node_split(const TrainOptions& o, const ViTConfig& config, const PlanInputs& in) {
  try {
    const std::optional<ScaledNodeSplit> split = node_split_from_scaling(o, config, in.cores_per_node, false);
    if (!split) return;
    const NodeSplit& best = split->choice.chosen;
    if (best.ranks == in.processes_per_node && best.threads == in.threads_per_process) {
      info("--layout auto: this job's ", best.ranks, " rank(s) x ", best.threads, " thread(s) per node is the ",
           split->describe());
      return;
    }
    info("--layout auto: this job runs ", in.processes_per_node, " rank(s) x ", in.threads_per_process,
         " thread(s) per node, but the ", split->describe(), " (launch ", best.ranks, " rank(s) per node of ",
         best.threads, " thread(s): srun --ntasks-per-node ", best.ranks, " --cpus-per-task ", best.threads, ")");
  } catch (const Error& e) {
    warn("--layout auto: core scaling not used: ", e.what());
  }
}

}  // namespace

LayoutPrediction choose_training_layout(Communicator& world, TrainOptions& o, const ViTConfig& config,
                                        const HostTopology& topology, const std::function<double()>& time_data_path) {
  PlanJob job;
  job.processes = world.size();
  const int here = topology.ranks_on(topology.host_of_rank.at(0));
  job.nodes = std::max(1, topology.hosts());
  LinkModel link;
  if (!o.link.empty()) {
    link = parse_link(o.link);
  } else if (world.size() > 1) {
    link = measure_link(world);  // collective
  } else {
    link = LinkModel{1e12, 0.0, 0.0, "one process: no link"};
  }
  measure_reduction(world, o, config, link);
  measure_reduction_across_hosts(world, topology, o, link);
  PlanInputs in = plan_inputs(o, config, job, link, false);
  least_gpu_memory_of_the_ranks(world, o, in);
  measure_reduction_inside_hosts(world, topology, o, config, in);
  in.threads_per_process = configured_threads();  // what this job's ranks run with
  in.cores_per_node = cores_of_the_job(world);
  LayoutPrediction prediction;
  if (world.rank() == 0) {
    if (time_data_path) in.data_seconds_per_image = time_data_path();  // alone: the others wait politely
  }
  bool profiled = false;
  ModelProfile profile;
  const std::optional<Plan> plan = make_plan_alongside(world, in, o, here, &profiled, &profile);
  if (world.rank() == 0) {
    info("hosts: ", topology.describe(), " (MPI's shared-memory split)");
    info(plan_text(in, *plan, profiled, cache_dir_of(o), &profile));
    if (launched_as_mpi_job()) say_preferred_node_split(o, config, in);
    prediction = plan->ranked.front();
    send_to_every_rank(world, prediction_json(prediction).dump(), kLayoutTag);
  } else {
    const nlohmann::json chosen = nlohmann::json::parse(receive_politely(world, kLayoutTag));
    prediction.layout = layout_from_json(chosen);
    prediction.step_seconds = chosen.at("step_seconds").get<double>();
    prediction.bubble = chosen.at("bubble").get<double>();
    prediction.data_seconds = chosen.at("data_seconds").get<double>();
  }
  const Layout& l = prediction.layout;
  o.pipeline_stages = l.stages;
  // Interleaved chunks are split evenly (the planner predicted that split; train takes one entry per stage).
  o.layers_per_stage =
      l.stages > 1 && l.schedule != ScheduleKind::interleaved_1f1b ? l.layers_per_stage : std::vector<int>{};
  o.pipeline_schedule = l.schedule == ScheduleKind::interleaved_1f1b ? "interleaved" : schedule_kind_name(l.schedule);
  o.virtual_stages = l.virtual_stages;
  o.micro_batch_size = l.micro_batch;
  o.recompute = l.recompute;
  o.shard_optimizer = l.shard;
  info(
      "--layout auto chose ", l.describe(), ": predicted ", format_seconds(prediction.step_seconds),
      " per step (flags: ",
      [&] {
        std::string flags;
        for (const auto& f : l.train_flags()) flags += (flags.empty() ? "" : " ") + f;
        return flags;
      }(),
      ")");
  return prediction;
}

void run_plan_command(const TrainOptions& options, int processes, int nodes, int rows, bool json, int cores) {
  VP_REQUIRE(processes >= 0, "--processes must be >= 1 (got ", processes, ")");
  VP_REQUIRE(nodes >= 0, "--nodes must be >= 1, or 0 for the hosts mpirun's ranks share memory on (got ", nodes, ")");
  VP_REQUIRE(rows >= 1, "--top must be >= 1 (got ", rows, ")");
  const ViTConfig config = model_config_for_plan(options);
  // One process without --processes: the ranks x threads a core-scaling profile prefers, when there is one.
  std::optional<ScaledNodeSplit> split;
  const bool cuda = parse_device_choice(options.device) != DeviceChoice::cpu && cuda_status().usable();
  // A core-scaling profile splits CPU cores; on GPUs a rank takes a GPU.
  if (!cuda && !launched_as_mpi_job() && processes == 0 && nodes <= 1) {
    split = node_split_from_scaling(options, config, cores > 0 ? cores : threads_of_one_process(options.threads), true);
  }
  run_on_world(1, options.threads, [&](Communicator& world) {
    PlanJob job;
    job.processes = launched_as_mpi_job() ? world.size() : split ? split->choice.chosen.ranks : std::max(1, processes);
    VP_REQUIRE(!launched_as_mpi_job() || processes == 0 || processes == world.size(), "--processes ", processes,
               " disagrees with mpirun's ", world.size(), " processes: give one of them");
    const HostTopology topology = learn_host_topology(world);
    job.nodes = std::min(nodes > 0 ? nodes : topology.hosts(), job.processes);
    LinkModel link;
    if (!options.link.empty()) {
      link = parse_link(options.link);
    } else if (world.size() > 1) {
      link = measure_link(world);
    } else {
      link = measure_local_link();
    }
    measure_reduction(world, options, config, link);
    if (launched_as_mpi_job()) measure_reduction_across_hosts(world, topology, options, link);
    PlanInputs in = plan_inputs(options, config, job, link, true);
    least_gpu_memory_of_the_ranks(world, options, in);
    if (split) {
      in.threads_per_process = split->choice.chosen.threads;
      in.cores_per_node = split->choice.cores;
    }
    if (launched_as_mpi_job()) measure_reduction_inside_hosts(world, topology, options, config, in);
    bool profiled = false;
    ModelProfile profile;
    // Under mpirun every rank profiles alongside rank 0, as train --layout auto does: the profile then holds what
    // the job's ranks cost each other on shared cores and memory (namespaced hosts share one machine's).
    const std::optional<Plan> together =
        make_plan_alongside(world, in, options, topology.ranks_on(topology.host_of_rank.at(0)), &profiled, &profile);
    if (world.rank() != 0) return;
    const Plan& plan = *together;
    if (json) {
      nlohmann::json j = plan_json(in, plan, rows);
      j["profile_measured"] = profiled;
      j["profile"] = {{"key", profile.key}, {"describe", profile.describe}};
      if (split) j["node_split"] = node_split_json(split->choice, split->source);
      j["hosts"] = {{"count", topology.hosts()},
                    {"host_of_rank", topology.host_of_rank},
                    {"source", launched_as_mpi_job() ? "MPI's shared-memory split" : "one process"}};
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      if (launched_as_mpi_job()) std::printf("hosts: %s (MPI's shared-memory split)\n", topology.describe().c_str());
      if (split) std::printf("%s\n", split->describe().c_str());
      std::printf("%s", plan_text(in, plan, profiled, cache_dir_of(options), &profile).c_str());
      std::string flags;
      for (const auto& f : plan.ranked.front().layout.train_flags()) flags += " " + f;
      std::printf(
          "chosen: %s\n  predicted %.3f s per step, bubble %.1f%%, %s per rank, %s per step on the wire\n"
          "  train with:%s (or --layout auto)\n",
          plan.ranked.front().layout.describe().c_str(), plan.ranked.front().step_seconds,
          100 * plan.ranked.front().bubble, format_bytes(plan.ranked.front().memory.total()).c_str(),
          format_bytes(plan.ranked.front().volume.wire).c_str(), flags.c_str());
    }
  });
}

}  // namespace vitpipe
