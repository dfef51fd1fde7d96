// Pipeline stages exchanging activations and gradients with NCCL (parallel/nccl_stage_exchange.h), end to end on the
// CPU: PipelineExecutor -> backend/nccl_group.h -> the module's table (module_entry.cpp) -> NcclExecutor -> the fake
// NCCL (ranks are threads), every stage's ViTStage on the module's CudaBackend over the fake CUDA runtime (an
// interleaved rank's chunks on one backend, as the trainer gives them). Every schedule (GPipe, 1F1B, ZB-H1 with 2, 3
// and 4 stages; interleaved with 2, 3 and 4 stages, 2 and 3 chunks, with replicas and --shard-optimizer) must give
// the gradients, loss and logits of one stage holding the whole model (as the CPU pipeline tests assert), and no
// activation may travel through host memory or a Communicator message: the fake runtime counts host copies, a
// counting Communicator the executor's messages, the fake NCCL its sends and recvs. The recorded groups replay under
// NCCL's unbuffered matching, and a log of the module calls shows no op touching a group's buffers before its join.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "../executors/fake_nccl.h"
#include "backend/cuda/module_abi.h"
#include "backend/cuda_module_backend.h"
#include "fake_cuda_runtime.h"
#include "model/vit_stage.h"
#include "parallel/local_communicator.h"
#include "parallel/optimizer_shards.h"
#include "parallel/pipeline_executor.h"
#include "util/random.h"

extern "C" const VitpipeCudaModule* vitpipe_cuda_module(void);

namespace vitpipe {
namespace {

// Forwards to `inner`, counting the point-to-point messages posted (the executor's activations on the host path,
// and the labels). The split groups are the inner communicator's own.
class CountingCommunicator final : public Communicator {
 public:
  explicit CountingCommunicator(Communicator& inner) : inner_(inner) {}
  int sends = 0;

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const char* kind() const override { return inner_.kind(); }
  CommRequest isend_bytes(const void* data, size_t bytes, int peer, int tag) override {
    ++sends;
    return inner_.isend_bytes(data, bytes, peer, tag);
  }
  CommRequest irecv_bytes(void* data, size_t bytes, int peer, int tag) override {
    return inner_.irecv_bytes(data, bytes, peer, tag);
  }
  CommRequest iallreduce_sum(float* data, size_t count) override { return inner_.iallreduce_sum(data, count); }
  CommRequest ireduce_sum(float* data, size_t count, int root) override {
    return inner_.ireduce_sum(data, count, root);
  }
  CommRequest ibroadcast(float* data, size_t count, int root) override { return inner_.ibroadcast(data, count, root); }
  void allreduce(double* data, size_t count, ReduceOp op) override { inner_.allreduce(data, count, op); }
  void broadcast_bytes(void* data, size_t bytes, int root) override { inner_.broadcast_bytes(data, bytes, root); }
  void barrier() override { inner_.barrier(); }
  std::vector<std::vector<std::byte>> gather_bytes(std::span<const std::byte> mine, int root) override {
    return inner_.gather_bytes(mine, root);
  }
  std::unique_ptr<Communicator> split(int color, int key) override { return inner_.split(color, key); }
  std::unique_ptr<Communicator> split_shared_memory() override { return inner_.split_shared_memory(); }
  [[noreturn]] void abort(const std::string& reason) override {
    inner_.abort(reason);
    std::abort();  // not reached: the inner abort does not return
  }

 private:
  Communicator& inner_;
};

// What the executor asks of the module, in order, per rank (thread): the module's table with backend_call,
// nccl_run and nccl_join wrapped. Each entry has the device byte ranges it touches: an op's tensors, a
// point-to-point group's buffers (groups without send / recv, the replicas' reductions, are not logged).
struct Logged {
  enum Kind { op, group, join } kind;
  int32_t code = -1;                                    // an op's VITPIPE_OP_*
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;  // [begin, end)
};
thread_local std::vector<Logged>* ordered_log = nullptr;  // null: not logging

size_t dtype_bytes(int32_t dtype) {
  switch (dtype) {
    case VITPIPE_DTYPE_F64:
    case VITPIPE_DTYPE_I64:
      return 8;
    case VITPIPE_DTYPE_F32:
    case VITPIPE_DTYPE_I32:
      return 4;
    case VITPIPE_DTYPE_U8:
    case VITPIPE_DTYPE_BOOL:
    case VITPIPE_DTYPE_I8:
      return 1;
    default:
      return 2;
  }
}

const VitpipeCudaModule& plain_module() { return *vitpipe_cuda_module(); }

int logged_backend_call(void* backend, VitpipeBackendCall* call, char* error, size_t error_size) {
  if (ordered_log) {
    Logged entry{Logged::op, call->op, {}};
    for (int t = 0; t < call->tensor_count; ++t) {
      const VitpipeTensorDesc& d = call->tensors[t];
      if (d.rank < 0 || d.memory == VITPIPE_MEMORY_HOST || d.data == nullptr) continue;
      size_t n = dtype_bytes(d.dtype);
      for (int k = 0; k < d.rank; ++k) n *= static_cast<size_t>(d.dims[k]);
      const auto begin = reinterpret_cast<uintptr_t>(d.data);
      entry.ranges.emplace_back(begin, begin + n);
    }
    ordered_log->push_back(std::move(entry));
  }
  return plain_module().backend_call(backend, call, error, error_size);
}

int logged_nccl_run(void* comm, const VitpipeNcclCall* calls, int count, int wait, char* error, size_t error_size) {
  if (ordered_log) {
    Logged entry{Logged::group, -1, {}};
    for (int k = 0; k < count; ++k) {
      const VitpipeNcclCall& c = calls[k];
      if (c.op != VITPIPE_NCCL_SEND && c.op != VITPIPE_NCCL_RECV) continue;
      const auto begin = reinterpret_cast<uintptr_t>(c.op == VITPIPE_NCCL_SEND ? c.send : c.recv);
      entry.ranges.emplace_back(begin, begin + c.count * dtype_bytes(c.dtype));
    }
    if (!entry.ranges.empty()) ordered_log->push_back(std::move(entry));
  }
  return plain_module().nccl_run(comm, calls, count, wait, error, error_size);
}

int logged_nccl_join(void* comm, char* error, size_t error_size) {
  if (ordered_log) ordered_log->push_back({Logged::join, -1, {}});
  return plain_module().nccl_join(comm, error, error_size);
}

const VitpipeCudaModule& logging_module() {
  static const VitpipeCudaModule table = [] {
    VitpipeCudaModule t = plain_module();
    t.backend_call = logged_backend_call;
    t.nccl_run = logged_nccl_run;
    t.nccl_join = logged_nccl_join;
    return t;
  }();
  return table;
}

// The first op in `log` that touches a buffer of a point-to-point group not joined since (a join waits for every
// group issued before it): "" when none does, so every received tensor is complete before it is read and no sent one
// is overwritten early.
std::string unjoined_touch(const std::vector<Logged>& log) {
  std::vector<size_t> open;  // groups issued since the last join
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i].kind == Logged::join) open.clear();
    if (log[i].kind == Logged::group) open.push_back(i);
    if (log[i].kind != Logged::op) continue;
    for (size_t g : open) {
      for (const auto& [gb, ge] : log[g].ranges) {
        for (const auto& [ob, oe] : log[i].ranges) {
          if (ob < ge && gb < oe) {
            return "entry " + std::to_string(i) + " (op " + std::to_string(log[i].code) + ") touches group entry " +
                   std::to_string(g) + " before its join";
          }
        }
      }
    }
  }
  return "";
}

// Groups of `log` followed by at least one op before the next join (communication overlapping compute), counting
// only those issued after a backward op began and before the last forward op (the steady state).
int overlapped_steady_groups(const std::vector<Logged>& log) {
  size_t first_backward = log.size(), last_forward = 0;
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i].kind != Logged::op) continue;
    if (log[i].code == VITPIPE_OP_ATTENTION_BACKWARD && first_backward == log.size()) first_backward = i;
    if (log[i].code == VITPIPE_OP_ATTENTION_FORWARD) last_forward = i;
  }
  int overlapped = 0;
  for (size_t i = first_backward; i < last_forward; ++i) {
    if (log[i].kind != Logged::group) continue;
    size_t k = i + 1;
    while (k < log.size() && log[k].kind != Logged::join && log[k].kind != Logged::op) ++k;
    if (k < log.size() && log[k].kind == Logged::op) ++overlapped;
  }
  return overlapped;
}

ViTConfig small_config(int64_t layers) {
  ViTConfig c;
  c.hidden_size = 32;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.intermediate_size = 48;
  c.image_size = 16;
  c.patch_size = 8;
  c.labels = {"a", "b", "c"};
  return c;
}

struct Problem {
  std::shared_ptr<const ParameterLayout> layout;
  FlatParameters values;
  Tensor images, targets;
  int64_t batch, micro_batch = 2;

  // `layers` encoder layers: a pipeline of p stages x v chunks needs p * v - 2 or more (only the first and the last
  // piece may hold none).
  explicit Problem(int64_t layers = 4, int64_t batch_size = 8)
      : layout(std::make_shared<const ParameterLayout>(small_config(layers))),
        values(FlatParameters::whole_model(layout)),
        batch(batch_size) {
    const ViTConfig& c = layout->config();
    Rng rng(3);
    for (int64_t i = 0; i < values.numel(); ++i) values.data()[i] = static_cast<float>(0.3 * rng.normal());
    images = Tensor::empty({batch, 3, c.image_size, c.image_size});
    for (int64_t i = 0; i < images.numel(); ++i) images.f32()[i] = static_cast<float>(rng.normal());
    targets = Tensor::empty({batch, c.num_labels()});
    for (int64_t i = 0; i < targets.numel(); ++i) targets.f32()[i] = rng.uniform() < 0.4 ? 1.0f : 0.0f;
  }
};

// What one run of a step and an evaluation gave, and what it moved.
struct Outcome {
  std::vector<float> grads;  // the whole model's, by flat offset
  std::vector<float> logits;
  double loss = 0;
  int host_copies = 0;                                        // the fake runtime's uploads and read-backs, all ranks
  int messages = 0;                                           // the executor's point-to-point messages, all ranks
  long long nccl_sends = 0, nccl_recvs = 0;                   // the fake NCCL's ncclSend / ncclRecv calls, all ranks
  bool device_to_device = true;                               // every rank's executor had the NCCL stage exchange
  std::vector<std::vector<fake_nccl::Record>> records;        // the fake NCCL's calls, by rank
  std::vector<int> stage_of_rank, replica_of_rank;            // by rank
  std::vector<std::vector<Logged>> step_log, evaluation_log;  // by rank: what the executor asked, in order
};

int host_copies_now() {
  auto& counts = fake_cuda_runtime::call_counts();
  return counts.pageable_uploads.load() + counts.pinned_uploads.load() + counts.pageable_readbacks.load();
}

// `replicas` > 1: data-parallel replicas of the pipeline, each on its share of the batch, reducing their gradients
// with NCCL where `nccl` says so; `sharded`: --shard-optimizer's reduce to each shard's owner (only the owner's shard
// of a replica's gradients is the sum, and only it is read back).
Outcome run_pipeline(const Problem& problem, int stages, ScheduleKind kind, int virtual_stages, bool nccl,
                     int replicas = 1, bool sharded = false) {
  const VitpipeCudaModule& module = logging_module();
  const ViTConfig& c = problem.layout->config();
  const int64_t per_replica = problem.batch / replicas;
  const int m = static_cast<int>(per_replica / problem.micro_batch);
  const auto pieces = split_segments(static_cast<int>(c.num_hidden_layers), stages * virtual_stages);
  Outcome out;
  out.grads.assign(static_cast<size_t>(problem.values.numel()), 0.0f);
  out.logits.assign(static_cast<size_t>(problem.batch * c.num_labels()), 0.0f);
  out.records.resize(static_cast<size_t>(stages * replicas));
  out.stage_of_rank.resize(static_cast<size_t>(stages * replicas));
  out.step_log.resize(static_cast<size_t>(stages * replicas));
  out.evaluation_log.resize(static_cast<size_t>(stages * replicas));
  out.replica_of_rank.resize(static_cast<size_t>(stages * replicas));
  std::mutex mutex;
  std::atomic<int> copies{0};

  run_local_ranks(stages * replicas, [&](Communicator& local) {
    CountingCommunicator world(local);
    ProcessGrid grid(world.size(), world.rank(), stages);
    // One backend (one stream) for the rank's chunks, as the trainer gives them on a GPU.
    const std::unique_ptr<Backend> backend = make_cuda_module_backend(module, 0, false);
    std::vector<std::unique_ptr<ViTStage>> owned;
    std::vector<ViTStage*> chunks;
    for (int chunk = 0; chunk < virtual_stages; ++chunk) {
      const SegmentRange range = pieces[static_cast<size_t>(chunk * stages + grid.stage())];
      StageOptions o;
      o.first_segment = range.first;
      o.last_segment = range.last;
      o.max_micro_batch = problem.micro_batch;
      o.slots = activation_slots_needed(kind, stages, m, grid.stage(), virtual_stages);
      o.split_backward = schedule_splits_backward(kind);
      owned.push_back(std::make_unique<ViTStage>(problem.layout, *backend, o));
      owned.back()->load_values(problem.values);
      owned.back()->zero_gradients();
      chunks.push_back(owned.back().get());
    }
    ExecutorOptions options;
    options.schedule = kind;
    options.virtual_stages = virtual_stages;
    options.buckets.bucket_bytes = 4096;
    options.nccl_stages = nccl;
    options.nccl_gradients = nccl && replicas > 1;
    if (sharded) {
      for (ViTStage* stage : chunks) {
        const FlatParameters& g = stage->gradients();
        options.shards.push_back(shard_ranges(g.begin(), g.begin() + g.numel(), replicas, 64));
      }
    }
    PipelineExecutor executor(grid, world, chunks, options, nullptr);
    StepShape shape;
    shape.micro_batch_sizes.assign(static_cast<size_t>(m), problem.micro_batch);
    shape.global_rows = problem.batch;
    auto source = [&](int mb) {
      const int64_t begin = grid.replica() * per_replica + mb * problem.micro_batch;
      MicroBatchData data;
      data.images = problem.images.slice(begin, begin + problem.micro_batch);
      data.targets = problem.targets.slice(begin, begin + problem.micro_batch);
      for (int64_t i = begin; i < begin + problem.micro_batch; ++i) data.indices.push_back(i);
      return data;
    };
    fake_nccl::take_records();
    local.barrier();  // every rank set up (its parameters uploaded)
    int copies_before = 0;
    if (world.rank() == 0) copies_before = host_copies_now();
    local.barrier();
    std::vector<Logged> step_log, evaluation_log;
    ordered_log = &step_log;
    const StepResult result = executor.train_step(shape, source);
    ordered_log = &evaluation_log;
    std::vector<std::pair<std::vector<int64_t>, std::vector<float>>> evaluated;
    executor.forward_only(
        shape, source, [&](const Tensor& logits, const Tensor&, const Tensor&, const std::vector<int64_t>& items) {
          evaluated.emplace_back(items, std::vector<float>(logits.f32(), logits.f32() + logits.numel()));
        });
    ordered_log = nullptr;
    local.barrier();  // every rank's copies of the step and the evaluation, none of the read-backs below
    if (world.rank() == 0) copies = host_copies_now() - copies_before;
    local.barrier();
    long long sends = 0, recvs = 0;
    std::vector<fake_nccl::Record> records = fake_nccl::take_records();
    for (const fake_nccl::Record& r : records) {
      sends += r.function == "ncclSend";
      recvs += r.function == "ncclRecv";
    }
    const int messages = world.sends;
    const double loss = local.allreduce(result.loss_sum);
    std::lock_guard lock(mutex);
    out.loss = loss;
    out.messages += messages;
    out.nccl_sends += sends;
    out.nccl_recvs += recvs;
    out.device_to_device = out.device_to_device && executor.stage_exchange() != nullptr;
    out.records[static_cast<size_t>(world.rank())] = std::move(records);
    out.stage_of_rank[static_cast<size_t>(world.rank())] = grid.stage();
    out.step_log[static_cast<size_t>(world.rank())] = std::move(step_log);
    out.evaluation_log[static_cast<size_t>(world.rank())] = std::move(evaluation_log);
    out.replica_of_rank[static_cast<size_t>(world.rank())] = grid.replica();
    for (size_t chunk = 0; chunk < chunks.size(); ++chunk) {
      const FlatParameters& g = chunks[chunk]->gradients();
      const Tensor host = to_host(chunks[chunk]->backend(), g.flat());
      ElementRange range{g.begin(), g.begin() + g.numel()};
      if (sharded) range = options.shards[chunk][static_cast<size_t>(grid.replica())];
      std::copy(host.f32() + (range.begin - g.begin()), host.f32() + (range.end - g.begin()),
                out.grads.begin() + range.begin);
    }
    for (const auto& [items, logits] : evaluated) {
      for (size_t r = 0; r < items.size(); ++r) {
        std::copy(logits.begin() + static_cast<std::ptrdiff_t>(r * c.num_labels()),
                  logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * c.num_labels()),
                  out.logits.begin() + items[r] * c.num_labels());
      }
    }
  });
  out.host_copies = copies;
  return out;
}

double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// Replays every rank's recorded groups with NCCL's point-to-point semantics, which the fake (buffered sends) does not
// have: a send completes only when its peer's matching recv runs (the k-th send from a to b meets b's k-th recv from
// a), the calls of one group progress together, and a rank's next group starts only when its current one finished
// (one stream). Returns an empty string when every group finishes, else what is stuck.
std::string replay_unbuffered(const std::vector<std::vector<fake_nccl::Record>>& ranks) {
  struct Call {
    bool send;
    int peer, ordinal;
    size_t count;
    bool matched = false;
  };
  const int n = static_cast<int>(ranks.size());
  std::vector<std::vector<std::vector<Call>>> groups(ranks.size());  // [rank][group][call]
  for (int r = 0; r < n; ++r) {
    std::map<std::pair<bool, int>, int> ordinals;  // (send?, peer) -> calls so far
    for (const fake_nccl::Record& record : ranks[static_cast<size_t>(r)]) {
      if (record.function == "ncclGroupStart") groups[static_cast<size_t>(r)].emplace_back();
      const bool send = record.function == "ncclSend";
      if (!send && record.function != "ncclRecv") continue;
      if (groups[static_cast<size_t>(r)].empty()) return "rank " + std::to_string(r) + ": a call outside a group";
      groups[static_cast<size_t>(r)].back().push_back(
          {send, record.peer, ordinals[{send, record.peer}]++, record.count});
    }
  }
  std::vector<size_t> head(ranks.size(), 0);
  auto head_group = [&](int r) -> std::vector<Call>* {
    auto& g = groups[static_cast<size_t>(r)];
    return head[static_cast<size_t>(r)] < g.size() ? &g[head[static_cast<size_t>(r)]] : nullptr;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      std::vector<Call>* mine = head_group(r);
      if (!mine) continue;
      for (Call& call : *mine) {
        if (call.matched || call.peer < 0 || call.peer >= n) continue;
        std::vector<Call>* theirs = head_group(call.peer);
        if (!theirs) continue;
        for (Call& partner : *theirs) {
          if (!partner.matched && partner.send != call.send && partner.peer == r && partner.ordinal == call.ordinal) {
            if (partner.count != call.count) return "rank " + std::to_string(r) + ": a send and recv of other sizes";
            partner.matched = call.matched = true;
            progress = true;
          }
        }
      }
      if (std::all_of(mine->begin(), mine->end(), [](const Call& c) { return c.matched; })) {
        ++head[static_cast<size_t>(r)];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < n; ++r) {
    if (head_group(r)) {
      stuck += "rank " + std::to_string(r) + " stuck at group " + std::to_string(head[static_cast<size_t>(r)]) +
               " of " + std::to_string(groups[static_cast<size_t>(r)].size()) + "; ";
    }
  }
  return stuck;
}

// replay_unbuffered for each replica's pipeline: the records name their peers by stage (the pipeline group's rank).
std::string replay_pipelines(const Outcome& out) {
  std::map<int, std::vector<std::vector<fake_nccl::Record>>> by_replica;
  const size_t stages = static_cast<size_t>(*std::max_element(out.stage_of_rank.begin(), out.stage_of_rank.end()) + 1);
  for (size_t r = 0; r < out.records.size(); ++r) {
    auto& pipeline = by_replica[out.replica_of_rank[r]];
    pipeline.resize(stages);
    pipeline[static_cast<size_t>(out.stage_of_rank[r])] = out.records[r];
  }
  std::string stuck;
  for (const auto& [replica, pipeline] : by_replica) {
    const std::string why = replay_unbuffered(pipeline);
    if (!why.empty()) stuck += "replica " + std::to_string(replica) + ": " + why;
  }
  return stuck;
}

// The point-to-point calls rank `from` issued to `to` (ncclSend) or took from it (ncclRecv).
long long calls_to(const Outcome& out, int from, const char* function, int to) {
  return std::count_if(out.records[static_cast<size_t>(from)].begin(), out.records[static_cast<size_t>(from)].end(),
                       [&](const fake_nccl::Record& r) { return r.function == function && r.peer == to; });
}

struct Case {
  ScheduleKind kind;
  int stages;
  int64_t micro_batch = 2;  // of the batch of 8: 4 micro-batches, or 8 at 1
};

class PipelineNcclOnFakes : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineNcclOnFakes, EqualsOneStageWithNoActivationThroughTheHost) {
  const Case param = GetParam();
  Problem problem;
  problem.micro_batch = param.micro_batch;
  const int m = static_cast<int>(problem.batch / problem.micro_batch);
  const Outcome one = run_pipeline(problem, 1, ScheduleKind::one_f_one_b, 1, false);
  const Outcome host = run_pipeline(problem, param.stages, param.kind, 1, false);
  const Outcome nccl = run_pipeline(problem, param.stages, param.kind, 1, true);

  EXPECT_TRUE(nccl.device_to_device);
  EXPECT_LT(relative_error(nccl.grads, one.grads), 1e-5);
  EXPECT_NEAR(nccl.loss, one.loss, 1e-6 * std::fabs(one.loss));
  EXPECT_LT(relative_error(nccl.logits, one.logits), 1e-5);

  // Per boundary: a step sends m activations and m gradients, an evaluation m activations.
  const int boundaries = param.stages - 1, transfers = 3 * m * boundaries;
  EXPECT_EQ(nccl.nccl_sends, transfers);
  EXPECT_EQ(nccl.nccl_recvs, transfers);
  EXPECT_EQ(host.nccl_sends, 0);
  EXPECT_EQ(replay_pipelines(nccl), "");
  // No op touches a group's buffers before the group is joined (step and evaluation, every rank).
  for (size_t r = 0; r < nccl.step_log.size(); ++r) {
    EXPECT_EQ(unjoined_touch(nccl.step_log[r]), "") << "rank " << r << ", step";
    EXPECT_EQ(unjoined_touch(nccl.evaluation_log[r]), "") << "rank " << r << ", evaluation";
  }
  // The host path posts one message per transfer plus the labels (stage 0 to the last, per micro-batch, step and
  // evaluation); over NCCL only the labels remain.
  EXPECT_EQ(nccl.messages, 2 * m);
  EXPECT_EQ(host.messages, 2 * m + transfers);
  // The host path reads each transfer back on its sender and uploads it on its receiver; NCCL copies none of them.
  EXPECT_EQ(host.host_copies - nccl.host_copies, 2 * transfers);
  EXPECT_EQ(nccl.host_copies, one.host_copies);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string kind = schedule_kind_name(info.param.kind);
  for (char& ch : kind) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return kind + "_" + std::to_string(info.param.stages) + "_stages_" + std::to_string(8 / info.param.micro_batch) +
         "_micro_batches";
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineNcclOnFakes,
                         ::testing::Values(Case{ScheduleKind::gpipe, 2}, Case{ScheduleKind::one_f_one_b, 2},
                                           Case{ScheduleKind::zero_bubble_h1, 2}, Case{ScheduleKind::gpipe, 4},
                                           Case{ScheduleKind::one_f_one_b, 4}, Case{ScheduleKind::zero_bubble_h1, 4},
                                           Case{ScheduleKind::gpipe, 3, 1}, Case{ScheduleKind::one_f_one_b, 3, 1},
                                           Case{ScheduleKind::zero_bubble_h1, 3, 1}),
                         case_name);

// Stages and replicas together: the pipeline's NCCL communicator beside the replicas' (all-reduce, or with
// --shard-optimizer the reduce to each shard's owner), 2 stages x 2 replicas.
TEST(PipelineNcclOnFakesReplicas, TwoStagesTwoReplicasEqualOneStage) {
  const Problem problem;
  const Outcome one = run_pipeline(problem, 1, ScheduleKind::one_f_one_b, 1, false);
  for (const bool sharded : {false, true}) {
    SCOPED_TRACE(sharded ? "--shard-optimizer" : "all-reduce");
    const Outcome both = run_pipeline(problem, 2, ScheduleKind::one_f_one_b, 1, true, 2, sharded);
    EXPECT_TRUE(both.device_to_device);
    EXPECT_EQ(both.messages, 2 * 2 * 2);  // labels only: 2 micro-batches per replica, step and evaluation
    EXPECT_EQ(replay_pipelines(both), "");
    for (size_t r = 0; r < both.step_log.size(); ++r) EXPECT_EQ(unjoined_touch(both.step_log[r]), "") << "rank " << r;
    EXPECT_LT(relative_error(both.grads, one.grads), 1e-5);
    EXPECT_NEAR(both.loss, one.loss, 1e-6 * std::fabs(one.loss));
    EXPECT_LT(relative_error(both.logits, one.logits), 1e-5);
  }
}

// The replay itself: two ranks sending to each other in groups of their own deadlock on NCCL (not on the fake), and
// the same calls paired in one group each do not.
TEST(PipelineNcclOnFakesReplay, FindsCrossedSendsAndAcceptsPairedOnes) {
  auto call = [](const char* function, int peer) {
    fake_nccl::Record r;
    r.function = function;
    r.peer = peer;
    r.count = 8;
    return r;
  };
  auto rank = [&](int peer, bool paired) {
    std::vector<fake_nccl::Record> calls = {call("ncclGroupStart", -1), call("ncclSend", peer)};
    if (!paired) calls.insert(calls.end(), {call("ncclGroupEnd", -1), call("ncclGroupStart", -1)});
    calls.insert(calls.end(), {call("ncclRecv", peer), call("ncclGroupEnd", -1)});
    return calls;
  };
  EXPECT_NE(replay_unbuffered({rank(1, false), rank(0, false)}), "");
  EXPECT_EQ(replay_unbuffered({rank(1, true), rank(0, true)}), "");
  EXPECT_EQ(replay_unbuffered({rank(1, true), rank(0, false)}), "");  // one side paired is enough
}

// Where the joins go: each group is joined before the first op that touches its buffers, not right after it is
// issued. The checker finds an op reading or overwriting a buffer of an unjoined group (here: the executor's own log
// with one join taken out), and in a 1F1B steady state some group now has compute enqueued before its join.
TEST(PipelineNcclOnFakesJoins, RemovingANeededJoinIsCaught) {
  Problem problem;
  problem.micro_batch = 1;
  const Outcome nccl = run_pipeline(problem, 4, ScheduleKind::one_f_one_b, 1, true);
  int joins = 0, caught = 0;
  for (const std::vector<Logged>& log : nccl.step_log) {
    ASSERT_EQ(unjoined_touch(log), "");
    for (size_t i = 0; i < log.size(); ++i) {
      if (log[i].kind != Logged::join) continue;
      std::vector<Logged> without = log;
      without.erase(without.begin() + static_cast<std::ptrdiff_t>(i));
      ++joins;
      caught += unjoined_touch(without).empty() ? 0 : 1;
    }
  }
  EXPECT_GT(joins, 0);
  EXPECT_GT(caught, 0);
  std::printf("joins %d, each needed by a later op: %d\n", joins, caught);
}

TEST(PipelineNcclOnFakesJoins, OneFOneBSteadyStateOverlapsGroupsWithCompute) {
  Problem problem;
  problem.micro_batch = 1;  // 8 micro-batches on 4 stages: a steady state on every stage
  const Outcome nccl = run_pipeline(problem, 4, ScheduleKind::one_f_one_b, 1, true);
  int overlapped = 0;
  for (size_t r = 0; r < nccl.step_log.size(); ++r) {
    const int here = overlapped_steady_groups(nccl.step_log[r]);
    std::printf("rank %zu: %d steady-state groups with compute before their join\n", r, here);
    overlapped += here;
  }
  EXPECT_GT(overlapped, 0);
}

// Interleaved 1F1B over NCCL: p stages x v chunks per rank on one backend, m micro-batches of one image, with and
// without replicas (all-reduce or --shard-optimizer). Equal to one stage, no activation through the host, every
// transfer an NCCL call that the unbuffered replay matches, and the wrap-around (the last stage's chunk c feeding
// stage 0's chunk c + 1) on the pipeline's communicator.
struct InterleavedCase {
  int stages, chunks, micro_batches, replicas = 1;
  bool sharded = false;
};

class PipelineNcclOnFakesInterleaved : public ::testing::TestWithParam<InterleavedCase> {};

TEST_P(PipelineNcclOnFakesInterleaved, EqualsOneStageDeviceToDeviceWithoutDeadlock) {
  const InterleavedCase param = GetParam();
  const int p = param.stages, v = param.chunks, m = param.micro_batches;
  Problem problem(std::max(4, p * v - 2), static_cast<int64_t>(m) * param.replicas);
  problem.micro_batch = 1;
  const Outcome one = run_pipeline(problem, 1, ScheduleKind::one_f_one_b, 1, false);
  const Outcome nccl = run_pipeline(problem, p, ScheduleKind::interleaved_1f1b, v, true, param.replicas, param.sharded);

  EXPECT_TRUE(nccl.device_to_device);
  EXPECT_LT(relative_error(nccl.grads, one.grads), 1e-5);
  EXPECT_NEAR(nccl.loss, one.loss, 1e-6 * std::fabs(one.loss));
  EXPECT_LT(relative_error(nccl.logits, one.logits), 1e-5);
  EXPECT_EQ(replay_pipelines(nccl), "");
  for (size_t r = 0; r < nccl.step_log.size(); ++r) {
    EXPECT_EQ(unjoined_touch(nccl.step_log[r]), "") << "rank " << r << ", step";
    EXPECT_EQ(unjoined_touch(nccl.evaluation_log[r]), "") << "rank " << r << ", evaluation";
  }
  // Per boundary between virtual stages: m activations and m gradients a step, m activations an evaluation.
  const long long transfers = 3LL * m * (p * v - 1) * param.replicas;
  EXPECT_EQ(nccl.nccl_sends, transfers);
  EXPECT_EQ(nccl.nccl_recvs, transfers);
  EXPECT_EQ(nccl.messages, 2 * m * param.replicas);  // the labels only
  // The wrap-around, replica 0 (world ranks 0 .. p-1 by stage): from 3 stages on, stage p-1 to stage 0 carries only
  // the v-1 chunk changes' activations (step and evaluation), and stage 0 to p-1 their gradients.
  if (p >= 3) {
    EXPECT_EQ(calls_to(nccl, p - 1, "ncclSend", 0), 2LL * m * (v - 1));
    EXPECT_EQ(calls_to(nccl, 0, "ncclRecv", p - 1), 2LL * m * (v - 1));
    EXPECT_EQ(calls_to(nccl, 0, "ncclSend", p - 1), 1LL * m * (v - 1));
    EXPECT_EQ(calls_to(nccl, p - 1, "ncclRecv", 0), 1LL * m * (v - 1));
  }
}

std::string interleaved_name(const ::testing::TestParamInfo<InterleavedCase>& info) {
  const InterleavedCase& c = info.param;
  std::string name = std::to_string(c.stages) + "_stages_" + std::to_string(c.chunks) + "_chunks_" +
                     std::to_string(c.micro_batches) + "_micro_batches";
  if (c.replicas > 1) name += "_" + std::to_string(c.replicas) + "_replicas";
  if (c.sharded) name += "_sharded";
  return name;
}

INSTANTIATE_TEST_SUITE_P(Interleaved, PipelineNcclOnFakesInterleaved,
                         ::testing::Values(InterleavedCase{2, 2, 2}, InterleavedCase{2, 2, 4}, InterleavedCase{2, 2, 8},
                                           InterleavedCase{2, 3, 4}, InterleavedCase{2, 3, 6}, InterleavedCase{3, 2, 3},
                                           InterleavedCase{3, 2, 6}, InterleavedCase{3, 3, 3}, InterleavedCase{3, 3, 9},
                                           InterleavedCase{4, 2, 4}, InterleavedCase{4, 2, 8}, InterleavedCase{4, 3, 4},
                                           InterleavedCase{4, 3, 8}, InterleavedCase{2, 2, 4, 2},
                                           InterleavedCase{2, 2, 4, 2, true}, InterleavedCase{3, 2, 3, 2, true},
                                           InterleavedCase{2, 3, 4, 2, true}, InterleavedCase{4, 2, 4, 2}),
                         interleaved_name);

}  // namespace
}  // namespace vitpipe
