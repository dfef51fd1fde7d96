#include "parallel/process_grid.h"

#include <charconv>
#include <numeric>

#include "parallel/communicator.h"
#include "util/error.h"

namespace vitpipe {

const char* rank_order_name(RankOrder order) {
  return order == RankOrder::stage_major ? "stage-major" : "replica-major";
}

ProcessGrid::ProcessGrid(int world_size, int rank, int stages, RankOrder order)
    : world_size_(world_size), rank_(rank), stages_(stages), order_(order) {
  VP_REQUIRE(world_size >= 1, "the world size must be at least 1, got ", world_size);
  VP_REQUIRE(stages >= 1, "--pipeline-stages must be at least 1, got ", stages);
  VP_REQUIRE(world_size % stages == 0, "cannot arrange ", world_size, " processes into ", stages,
             " pipeline stages: the number of processes (mpirun -np) must be a multiple of --pipeline-stages");
  VP_REQUIRE(rank >= 0 && rank < world_size, "rank ", rank, " is outside [0, ", world_size, ")");
}

int ProcessGrid::rank_of(int stage, int replica) const {
  VP_REQUIRE(stage >= 0 && stage < stages_ && replica >= 0 && replica < replicas(), "(stage ", stage, ", replica ",
             replica, ") is outside the grid of ", stages_, " stages x ", replicas(), " replicas");
  return order_ == RankOrder::stage_major ? stage * replicas() + replica : replica * stages_ + stage;
}

int ProcessGrid::stage_of(int rank) const {
  VP_REQUIRE(rank >= 0 && rank < world_size_, "rank ", rank, " is outside [0, ", world_size_, ")");
  return order_ == RankOrder::stage_major ? rank / replicas() : rank % stages_;
}

int ProcessGrid::replica_of(int rank) const {
  VP_REQUIRE(rank >= 0 && rank < world_size_, "rank ", rank, " is outside [0, ", world_size_, ")");
  return order_ == RankOrder::stage_major ? rank % replicas() : rank / stages_;
}

std::vector<int> ProcessGrid::data_parallel_ranks() const {
  std::vector<int> ranks;
  for (int r = 0; r < replicas(); ++r) ranks.push_back(rank_of(stage(), r));
  return ranks;
}

std::vector<int> ProcessGrid::pipeline_ranks() const {
  std::vector<int> ranks;
  for (int s = 0; s < stages_; ++s) ranks.push_back(rank_of(s, replica()));
  return ranks;
}

std::string ProcessGrid::describe() const {
  return concat("rank ", rank_, ": stage ", stage(), " of ", stages_, ", replica ", replica(), " of ", replicas(),
                order_ == RankOrder::stage_major ? " (ranks stage-major)" : "");
}

std::unique_ptr<Communicator> split_data_parallel_group(Communicator& world, const ProcessGrid& grid) {
  VP_REQUIRE(world.size() == grid.world_size() && world.rank() == grid.rank(), "the process grid (", grid.describe(),
             ") does not match the communicator (rank ", world.rank(), " of ", world.size(), ")");
  return world.split(grid.stage(), grid.replica());
}

std::vector<int> even_blocks_per_piece(int layers, int pieces) {
  VP_REQUIRE(layers >= 0, "the model must have at least 0 encoder layers, got ", layers);
  VP_REQUIRE(pieces >= 1, "cannot split a model into ", pieces, " pieces");
  VP_REQUIRE(pieces <= layers + 2, "cannot split ", layers, " encoder layers + embeddings + head into ", pieces,
             " non-empty pieces: at most ", layers + 2);
  std::vector<int> blocks(static_cast<size_t>(pieces), layers / pieces);
  int extra = layers % pieces;
  std::vector<int> order;
  for (int i = 1; i + 1 < pieces; ++i) order.push_back(i);
  if (pieces > 1) order.push_back(pieces - 1);
  order.push_back(0);
  for (int i : order) {
    if (extra == 0) break;
    ++blocks[static_cast<size_t>(i)];
    --extra;
  }
  return blocks;
}

namespace {

std::string list_text(const std::vector<int>& values) {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) text += concat(i ? "," : "", values[i]);
  return text;
}

}  // namespace

std::vector<SegmentRange> split_segments(int layers, int pieces, const std::vector<int>& blocks_per_piece) {
  std::vector<int> blocks = blocks_per_piece;
  if (blocks.empty()) {
    blocks = even_blocks_per_piece(layers, pieces);
  } else {
    const std::string given = list_text(blocks);
    VP_REQUIRE(static_cast<int>(blocks.size()) == pieces, "--layers-per-stage ", given, " has ", blocks.size(),
               " entries but the pipeline has ", pieces, " (virtual) stages: give one entry per stage");
    for (size_t i = 0; i < blocks.size(); ++i) {
      VP_REQUIRE(blocks[i] >= 0, "--layers-per-stage ", given, ": entry ", i + 1, " is negative");
    }
    const int sum = std::accumulate(blocks.begin(), blocks.end(), 0);
    VP_REQUIRE(sum == layers, "--layers-per-stage ", given, " sums to ", sum, " but the model has ", layers,
               " encoder layers");
    for (int i = 1; i + 1 < pieces; ++i) {
      VP_REQUIRE(blocks[static_cast<size_t>(i)] > 0, "--layers-per-stage ", given, " gives stage ", i,
                 " no encoder layer: only the first stage (embeddings) and the last (head) may hold none");
    }
  }
  std::vector<SegmentRange> ranges;
  int next_block = 0;  // 0-based encoder block; block b is segment b + 1
  for (int i = 0; i < pieces; ++i) {
    const int count = blocks[static_cast<size_t>(i)];
    SegmentRange range;
    range.first = i == 0 ? 0 : next_block + 1;
    range.last = i == pieces - 1 ? layers + 1 : next_block + count;
    next_block += count;
    ranges.push_back(range);
  }
  return ranges;
}

std::vector<int> parse_layers_per_stage(std::string_view text) {
  std::vector<int> values;
  size_t start = 0;
  int index = 1;
  for (;;) {
    const size_t comma = text.find(',', start);
    std::string_view item =
        text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    int value = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), value);
    VP_REQUIRE(!item.empty() && error == std::errc() && end == item.data() + item.size(), "--layers-per-stage '", text,
               "': entry ", index, " ('", item, "') is not an integer; expected e.g. 3,3,3,3");
    values.push_back(value);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
    ++index;
  }
  return values;
}

SegmentRange ParallelPlan::segments_of(int stage, int chunk) const {
  const int index = virtual_stage_of(config.stages, stage, chunk);
  VP_REQUIRE(stage >= 0 && stage < config.stages && chunk >= 0 && chunk < config.virtual_stages, "stage ", stage,
             " chunk ", chunk, " is outside the plan");
  return pieces.at(static_cast<size_t>(index));
}

std::string ParallelPlan::describe() const {
  const int layers = config.layers;
  std::string text;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const SegmentRange& r = pieces[i];
    const int stage = static_cast<int>(i) % config.stages;
    text += config.virtual_stages > 1 ? concat("stage ", stage, " chunk ", i / static_cast<size_t>(config.stages))
                                      : concat("stage ", stage);
    text += concat(": segments ", r.first, "..", r.last, " (");
    std::string parts;
    if (r.holds(0)) parts += "embeddings";
    const int first_block = std::max(r.first, 1) - 1;
    const int last_block = std::min(r.last, layers) - 1;
    if (last_block >= first_block) {
      parts += concat(parts.empty() ? "" : ", ", "encoder layers ", first_block, "..", last_block);
    }
    if (r.holds(layers + 1)) parts += concat(parts.empty() ? "" : ", ", "head");
    text += parts + ")\n";
  }
  return text;
}

ParallelPlan validate_parallel_config(const ParallelConfig& config) {
  VP_REQUIRE(config.stages >= 1, "--pipeline-stages must be at least 1, got ", config.stages);
  VP_REQUIRE(config.world_size >= 1, "the number of processes must be at least 1, got ", config.world_size);
  VP_REQUIRE(config.world_size % config.stages == 0, "cannot arrange ", config.world_size, " processes into ",
             config.stages,
             " pipeline stages: the number of processes (mpirun -np) must be a multiple of "
             "--pipeline-stages");
  VP_REQUIRE(config.layers >= 0, "the model must have at least 0 encoder layers, got ", config.layers);
  VP_REQUIRE(config.virtual_stages >= 1, "virtual stages per rank must be at least 1, got ", config.virtual_stages);
  if (config.schedule != ScheduleKind::interleaved_1f1b) {
    VP_REQUIRE(config.virtual_stages == 1, "the ", schedule_kind_name(config.schedule),
               " schedule holds one model chunk per rank; virtual stages per rank must be 1, got ",
               config.virtual_stages);
  }
  // An interleaved rank hands each chunk's activations to the next stage's rank; with one stage that rank is itself,
  // which no communicator sends to (the run failed mid-step with "rank 0 cannot send to itself").
  VP_REQUIRE(config.stages > 1 || config.virtual_stages == 1, "--pipeline-schedule interleaved needs at least 2 ",
             "pipeline stages (its chunks hand activations to the next stage's rank), got 1 stage x ",
             config.virtual_stages, " virtual stages; use --pipeline-schedule 1f1b or more --pipeline-stages");
  const int pieces = config.stages * config.virtual_stages;
  if (config.virtual_stages == 1) {
    VP_REQUIRE(pieces <= config.layers + 2, "--pipeline-stages ", config.stages, " is more stages than the model has ",
               "pieces: ", config.layers, " encoder layers + embeddings + head allow at most ", config.layers + 2,
               " stages");
  } else {
    VP_REQUIRE(pieces <= config.layers + 2, "--pipeline-stages ", config.stages, " x ", config.virtual_stages,
               " virtual stages = ", pieces, " model chunks, more than the model has pieces: ", config.layers,
               " encoder layers + embeddings + head allow at most ", config.layers + 2);
  }
  VP_REQUIRE(config.micro_batch >= 1, "--micro-batch-size must be at least 1, got ", config.micro_batch);
  VP_REQUIRE(config.global_batch >= 1, "the global batch size must be at least 1, got ", config.global_batch);
  ParallelPlan plan;
  plan.config = config;
  plan.replicas = config.world_size / config.stages;
  const int per_step = config.micro_batch * plan.replicas;
  VP_REQUIRE(config.global_batch % per_step == 0, "global batch size ", config.global_batch,
             " is not divisible by micro-batch size ", config.micro_batch, " x ", plan.replicas,
             " replicas = ", per_step, ": every replica must run a whole number of micro-batches per step");
  plan.micro_batches = config.global_batch / per_step;
  VP_REQUIRE(plan.micro_batches >= config.stages, "global batch size ", config.global_batch, " / (micro-batch size ",
             config.micro_batch, " x ", plan.replicas, " replicas) = ", plan.micro_batches,
             " micro-batches per step, fewer than the ", config.stages,
             " pipeline stages: a pipeline needs at least one micro-batch per stage (use a global batch of at least ",
             config.stages * per_step, " or a smaller --micro-batch-size)");
  if (config.schedule == ScheduleKind::interleaved_1f1b) {
    VP_REQUIRE(plan.micro_batches % config.stages == 0, "the interleaved-1f1b schedule needs micro-batches per step (",
               plan.micro_batches, ") to be a multiple of the ", config.stages, " pipeline stages");
  }
  plan.pieces = split_segments(config.layers, pieces, config.layers_per_stage);
  return plan;
}

}  // namespace vitpipe
