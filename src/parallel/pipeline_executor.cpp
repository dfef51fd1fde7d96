#include "parallel/pipeline_executor.h"

#include <chrono>
#include <cstring>
#include <deque>

#include "backend/cuda_module_backend.h"
#include "parallel/transfer_plan.h"
#include "util/error.h"

namespace vitpipe {
namespace {

constexpr int kLabelTagBase = 30000;  // below kMaxUserTag, above any activation/gradient tag of a realistic step

int label_tag(int micro_batch) { return kLabelTagBase + micro_batch % 1000; }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

// Per step: which slot each micro-batch occupies in each chunk, and the requests in flight.
struct PipelineExecutor::Pending {
  struct SlotState {
    int owner = -1;  // micro-batch using the slot, -1 when free
    CommRequest recv_activation, recv_grad;
    bool backward_done = false;
    // A stage whose memory the host cannot reach (a GPU's) receives into these host buffers; the copy into the
    // stage follows the wait (MPI only ever sees host memory: Debian's Open MPI is not CUDA-aware).
    std::vector<float> activation_host, grad_host;
  };
  // Outgoing activations and gradients travel from buffers of their own, not from the slots. A send completes only
  // once the receiver posts its receive (MPI's rendezvous protocol for all but small messages), and the receiver
  // may be waiting on this rank: a slot that waited for its send to be reusable deadlocked interleaved 1F1B
  // (2 stages, v = 2, 24 or more micro-batches). The slot counts come from the schedule simulator, which models
  // buffered sends; these buffers are what makes that model true.
  struct StagedSend {
    std::vector<float> data;
    CommRequest request;
  };
  std::deque<StagedSend> staged_sends;                // a deque: elements stay put while sends are in flight
  std::vector<std::vector<SlotState>> slots;          // [chunk][slot]
  std::vector<std::vector<int>> slot_of;              // [chunk][micro_batch]
  std::vector<MicroBatchData> loaded;                 // first stage: kept until their labels are sent
  std::vector<CommRequest> label_sends;               // first stage
  std::vector<std::vector<std::byte>> label_buffers;  // last stage: received labels + items, per micro-batch
  std::vector<CommRequest> label_recvs;               // last stage
  std::vector<Tensor> targets;                        // last stage, per micro-batch
  std::vector<Tensor> weights;                        // last stage, per micro-batch (label weights, when weighted)
  std::vector<std::vector<int64_t>> items;            // last stage, per micro-batch
};

PipelineExecutor::PipelineExecutor(const ProcessGrid& grid, Communicator& world, std::vector<ViTStage*> chunks,
                                   ExecutorOptions options, TraceRecorder* trace)
    : grid_(grid), world_(world), chunks_(std::move(chunks)), options_(options), trace_(trace) {
  VP_REQUIRE(!chunks_.empty() && static_cast<int>(chunks_.size()) == options_.virtual_stages, "executor: expected ",
             options_.virtual_stages, " model chunks on this rank, got ", chunks_.size());
  for (ViTStage* chunk : chunks_) {
    VP_REQUIRE(chunk->options().split_backward == schedule_splits_backward(options_.schedule), "executor: the ",
               schedule_kind_name(options_.schedule), " schedule needs stages built with split_backward ",
               schedule_splits_backward(options_.schedule) ? "on" : "off");
  }
  pipeline_group_ = world_.split(grid_.replica(), grid_.stage());
  data_parallel_group_ = split_data_parallel_group(world_, grid_);
  if (options_.nccl_stages && pipeline_group_->size() > 1) {
    // One communicator per pipeline, on the backend every chunk of this rank shares: its stream is the one order
    // the communicator's events keep (an interleaved rank's chunks run one after another anyway).
    for (ViTStage* chunk : chunks_) {
      VP_REQUIRE(&chunk->backend() == &chunks_.front()->backend(),
                 "executor: stages over NCCL need this rank's model chunks on one backend (one stream); got a backend "
                 "per chunk");
    }
    stage_exchange_ = std::make_unique<NcclStageExchange>(chunks_.front()->backend(), *pipeline_group_);
  }
  // The data-parallel gradient reduction runs over MPI on host memory (device gradients through host mirrors,
  // gradient_buckets.h), or with NCCL on the device memory itself (nccl_gradients). The sharded optimizer's parameter
  // all-gather reads the parameters directly: over MPI that needs host memory, with NCCL it broadcasts on the device.
  std::vector<FlatParameters> grads, params;
  GradientBucketOptions bucket_options = options_.buckets;
  for (ViTStage* chunk : chunks_) {
    grads.push_back(chunk->gradients());
    params.push_back(chunk->parameters());
    bucket_options.backends.push_back(&chunk->backend());
  }
  if (options_.nccl_gradients && data_parallel_group_->size() > 1) {
    for (ViTStage* chunk : chunks_) {
      nccl_groups_.push_back(std::make_unique<NcclGroup>(chunk->backend(), *data_parallel_group_));
      bucket_options.nccl.push_back(nccl_groups_.back().get());
    }
  }
  if (sharded()) {
    for (ViTStage* chunk : chunks_) {
      VP_REQUIRE(chunk->backend().host_accessible() || options_.nccl_gradients,
                 "--shard-optimizer is not supported on the ", chunk->backend().name(),
                 " backend without NCCL: its parameter all-gather would run over host memory; train without "
                 "--shard-optimizer");
    }
    VP_REQUIRE(options_.shards.size() == chunks_.size(), "executor: ", options_.shards.size(), " shard lists for ",
               chunks_.size(), " chunks");
    for (const auto& shards : options_.shards) {
      VP_REQUIRE(static_cast<int>(shards.size()) == data_parallel_group_->size(), "executor: ", shards.size(),
                 " shards for ", data_parallel_group_->size(), " replicas");
    }
    bucket_options.shards = options_.shards;
  }
  buckets_ = std::make_unique<GradientBuckets>(std::move(grads), data_parallel_group_.get(), bucket_options, trace_);
  if (sharded()) {
    std::vector<DeviceReducer*> device_collectives;
    for (const auto& group : nccl_groups_) device_collectives.push_back(group.get());
    gather_ = std::make_unique<ParameterGather>(std::move(params), buckets_->buckets(), data_parallel_group_.get(),
                                                trace_, options_.buckets.trace_lane + 1, device_collectives);
  }
}

void PipelineExecutor::start_parameter_gather() {
  if (gather_) gather_->start();
}

void PipelineExecutor::complete_parameters() {
  if (!gather_ || !gather_->in_flight()) return;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const StageOptions& o = chunks_[c]->options();
    for (int segment = o.first_segment; segment <= o.last_segment; ++segment) {
      if (gather_->wait_segment(static_cast<int>(c), segment)) chunks_[c]->parameters_changed(segment, segment);
    }
  }
}

PipelineExecutor::~PipelineExecutor() = default;

void PipelineExecutor::exchange_shape(StepShape& shape) {
  const size_t m = shape.micro_batch_sizes.size();
  std::vector<int64_t> packed(m + 2);
  if (grid_.first_stage()) {
    std::copy(shape.micro_batch_sizes.begin(), shape.micro_batch_sizes.end(), packed.begin());
    packed[m] = shape.global_rows;
    std::memcpy(&packed[m + 1], &shape.global_label_weight, sizeof(double));
  }
  pipeline_group_->broadcast_bytes(packed.data(), packed.size() * sizeof(int64_t), 0);
  std::copy(packed.begin(), packed.begin() + static_cast<std::ptrdiff_t>(m), shape.micro_batch_sizes.begin());
  shape.global_rows = packed[m];
  std::memcpy(&shape.global_label_weight, &packed[m + 1], sizeof(double));
  for (int64_t size : shape.micro_batch_sizes) {
    VP_REQUIRE(size >= 1, "executor: every micro-batch needs at least one sample (got ", size, ")");
  }
}

StepResult PipelineExecutor::train_step(const StepShape& requested, const MicroBatchSource& source) {
  StepShape shape = requested;
  exchange_shape(shape);
  const int m = static_cast<int>(shape.micro_batch_sizes.size());
  const auto program = make_schedule(options_.schedule, grid_.stages(), m, grid_.stage(), options_.virtual_stages);
  StepResult result;
  const bool gathering = gather_ && gather_->in_flight();
  const auto start = std::chrono::steady_clock::now();
  run(program, shape, source, nullptr, &result);
  complete_parameters();  // a segment no forward of this step waited for (none in practice)
  result.seconds = seconds_since(start);
  result.reduction = buckets_->stats();
  CommunicationStats& comm = result.comm;
  comm.replicas = data_parallel_group_->size();
  if (comm.replicas > 1) {  // one replica: the gradients stay where they are
    (result.reduction.sharded ? comm.reduce_scatter_bytes : comm.allreduce_bytes) = result.reduction.bytes;
  }
  comm.collective_window_seconds = result.reduction.window_seconds;
  comm.collective_exposed_seconds = result.reduction.exposed_seconds;
  if (gathering && comm.replicas > 1) {
    const ParameterGatherStats& gathered = gather_->stats();
    comm.allgather_bytes = gathered.bytes;
    comm.collective_window_seconds += gathered.window_seconds;
    comm.collective_exposed_seconds += gathered.exposed_seconds;
  }
  return result;
}

void PipelineExecutor::forward_only(const StepShape& requested, const MicroBatchSource& source,
                                    const LogitsSink& sink) {
  complete_parameters();
  StepShape shape = requested;
  exchange_shape(shape);
  const int m = static_cast<int>(shape.micro_batch_sizes.size());
  const int v = options_.virtual_stages, p = grid_.stages();
  // Forwards only, p micro-batches at a time through the chunks (transfer_plan.h): acyclic along the virtual stages,
  // so it cannot deadlock, and a chunk's inputs arrive as it needs them.
  const std::vector<Instruction> program = forward_only_schedule(p, m, grid_.stage(), v);
  run(program, shape, source, &sink, nullptr);
}

void PipelineExecutor::run(const std::vector<Instruction>& program, const StepShape& shape,
                           const MicroBatchSource& source, const LogitsSink* sink, StepResult* result) {
  const bool training = result != nullptr;
  const int m = static_cast<int>(shape.micro_batch_sizes.size());
  const int p = grid_.stages(), v = options_.virtual_stages;
  const int last_virtual = v * p - 1;
  const ViTConfig& config = chunks_.front()->config();
  const bool multi_label = config.problem_type == ProblemType::multi_label;
  const int64_t labels = config.num_labels();
  // The loss is the mean over the global batch's known elements: with label weights their global sum (a batch
  // whose labels are all masked contributes nothing), else rows x labels.
  const bool weighted = multi_label && shape.has_label_weights();
  const double denominator =
      weighted ? shape.global_label_weight : static_cast<double>(shape.global_rows * (multi_label ? labels : 1));
  const double grad_scale = denominator > 0 ? 1.0 / denominator : 0.0;

  // On a GPU the loss sums are read once the step's backward passes are enqueued (cuda_module_backend.h's
  // defer_losses): reading each micro-batch's at once would wait for the device before the host enqueued its
  // backward. Other backends read them at once (defer_losses says no).
  struct DeferredLosses {
    std::vector<Backend*> backends;
    ~DeferredLosses() {  // a step ended by a throw: its deferred sums are dropped
      for (Backend* b : backends) {
        try {
          take_losses(*b);
        } catch (...) {
        }
      }
    }
  } deferred;
  if (training) {
    for (ViTStage* chunk : chunks_) {
      if (chunk->has_head() && defer_losses(chunk->backend())) deferred.backends.push_back(&chunk->backend());
    }
  }

  Pending st;
  st.slots.resize(chunks_.size());
  st.slot_of.assign(chunks_.size(), std::vector<int>(static_cast<size_t>(m), -1));
  for (size_t c = 0; c < chunks_.size(); ++c) st.slots[c].resize(static_cast<size_t>(chunks_[c]->options().slots));
  st.loaded.resize(static_cast<size_t>(m));
  st.label_sends.resize(static_cast<size_t>(m));
  st.label_buffers.resize(static_cast<size_t>(m));
  st.label_recvs.resize(static_cast<size_t>(m));
  st.targets.resize(static_cast<size_t>(m));
  st.weights.resize(static_cast<size_t>(m));
  st.items.resize(static_cast<size_t>(m));

  // The last backward (or weight-gradient pass) of each chunk in this step: its segments' gradients are final as
  // it completes them.
  std::vector<int> last_backward(chunks_.size(), -1);
  for (const Instruction& in : program) {
    if (in.op == Op::backward || in.op == Op::backward_weight) {
      last_backward[static_cast<size_t>(in.chunk)] = in.micro_batch;
    }
  }

  auto virtual_stage = [&](int chunk) { return virtual_stage_of(p, grid_.stage(), chunk); };
  auto size_of = [&](int mb) { return shape.micro_batch_sizes[static_cast<size_t>(mb)]; };
  const size_t weight_bytes_per_row = weighted ? static_cast<size_t>(labels) * sizeof(float) : 0;
  auto label_bytes = [&](int64_t b) {
    return static_cast<size_t>(b) * (multi_label ? static_cast<size_t>(labels) * sizeof(float) : sizeof(int64_t)) +
           static_cast<size_t>(b) * (weight_bytes_per_row + sizeof(int64_t));
  };

  auto record = [&](const char* name, const char* category, int64_t start_ns, int lane, int mb, int64_t value = -1,
                    int64_t bytes = -1) {
    if (trace_) trace_->record(name, category, start_ns, trace_->now_ns(), lane, mb, value, bytes);
  };
  auto now = [&] { return trace_ ? trace_->now_ns() : 0; };
  CommunicationStats unused_comm;
  CommunicationStats& comm = training ? result->comm : unused_comm;
  // Waits on messages, timed for the communication figures.
  auto timed_wait = [&](CommRequest& request) {
    if (!request.pending()) return;
    const auto t0 = std::chrono::steady_clock::now();
    request.wait();
    comm.p2p_wait_seconds += seconds_since(t0);
  };

  // Copies `data` into a staged buffer whose previous send has completed (a new one if none has) and sends it.
  // Host memory for a receive into `target` (a stage's tensor): the tensor itself where the host can reach it, else
  // `buffer`, copied into the stage by upload_received after the wait.
  auto receive_buffer = [&](ViTStage& stage, const Tensor& target, std::vector<float>& buffer) {
    if (stage.backend().host_accessible()) return std::span<float>(target.f32(), static_cast<size_t>(target.numel()));
    buffer.resize(static_cast<size_t>(target.numel()));
    return std::span<float>(buffer);
  };
  auto upload_received = [&](ViTStage& stage, const Tensor& target, std::vector<float>& buffer) {
    if (stage.backend().host_accessible()) return;
    stage.backend().copy_from_host(Tensor::wrap(buffer.data(), target.shape(), DType::f32), target);
  };
  auto send_staged = [&](Backend& backend, const Tensor& data, int peer, int tag) {
    Pending::StagedSend* free = nullptr;
    for (auto& send : st.staged_sends) {
      if (send.request.test()) {
        free = &send;
        break;
      }
    }
    if (!free) free = &st.staged_sends.emplace_back();
    if (backend.host_accessible()) {
      const float* values = data.f32();
      free->data.assign(values, values + data.numel());
    } else {
      free->data.resize(static_cast<size_t>(data.numel()));
      backend.copy_to_host(data, Tensor::wrap(free->data.data(), data.shape(), DType::f32));
    }
    free->request = world_.isend(std::span<const float>(free->data), peer, tag);
  };

  // Device to device: virtual stage j lives on stage j % p, the pipeline group's rank (the last stage's chunk c
  // sends to stage 0's chunk c + 1; transfer_plan.h names the peers).
  NcclStageExchange* links = stage_exchange_.get();

  // A slot for (chunk, mb): the one it already has, or a free one. A slot frees once its micro-batch is done
  // (backward in training, forward in evaluation).
  auto slot_for = [&](int chunk, int mb) {
    int& slot = st.slot_of[static_cast<size_t>(chunk)][static_cast<size_t>(mb)];
    if (slot >= 0) return slot;
    auto& slots = st.slots[static_cast<size_t>(chunk)];
    for (size_t s = 0; s < slots.size(); ++s) {
      auto& state = slots[s];
      if (state.owner >= 0 && state.backward_done) state.owner = -1;  // its sends left from staged copies
      if (state.owner < 0) {
        state.owner = mb;
        state.backward_done = false;
        slot = static_cast<int>(s);
        break;
      }
    }
    VP_REQUIRE(slot >= 0, "executor: no free activation slot for micro-batch ", mb, " of chunk ", chunk, " (",
               slots.size(), " slots); the stage was built with too few slots for this schedule");
    return slot;
  };

  // NCCL's groups, in the order transfer_plan.h gives (deadlock-free under NCCL's unbuffered matching). A group is
  // joined just before the first op that reads or writes a slot it touched (slot_group), not right after it is
  // issued, so the compute in between overlaps it; a group the next op needs is joined before the next is issued
  // (a join waits for every group issued so far).
  TransferPlan plan;
  if (links) {
    std::vector<std::vector<Instruction>> programs;
    if (training) {
      programs = make_all_schedules(options_.schedule, p, m, v);
    } else {
      for (int s = 0; s < p; ++s) programs.push_back(forward_only_schedule(p, m, s, v));
    }
    VP_REQUIRE(programs[static_cast<size_t>(grid_.stage())] == program,
               "executor: the step's program is not the one the transfer plan assumes");
    plan = plan_transfers(programs, v, grid_.stage(), training);
  }
  std::vector<std::vector<int64_t>> slot_group(chunks_.size());  // [chunk][slot]: the last group touching the slot
  for (size_t c = 0; c < chunks_.size(); ++c) slot_group[c].assign(st.slots[c].size(), 0);
  auto join_slot = [&](int chunk, int slot) {
    if (links) links->join_through(slot_group[static_cast<size_t>(chunk)][static_cast<size_t>(slot)]);
  };
  // Issues `groups`; joins right after one that receives for (chunk, mb), the op about to run, so that the groups
  // after it stay unjoined while that op computes.
  auto issue = [&](const std::vector<TransferPlan::Group>& groups, int chunk, int mb) {
    for (const TransferPlan::Group& group : groups) {
      if (!training) {
        // An evaluation's slot is free once its output's send is issued; a receive in the same group may take it
        // (it writes the input, the send reads the output), and the slot's next op joins the group first.
        for (const PlannedTransfer& t : group) {
          if (t.send) {
            const int s = slot_for(t.chunk, t.micro_batch);
            st.slots[static_cast<size_t>(t.chunk)][static_cast<size_t>(s)].backward_done = true;
          }
        }
      }
      std::vector<std::pair<int, int>> touched;
      bool needed = false;
      for (const PlannedTransfer& t : group) {
        const ViTStage& owner = *chunks_[static_cast<size_t>(t.chunk)];
        const int s = slot_for(t.chunk, t.micro_batch);
        const int64_t b = size_of(t.micro_batch);
        if (t.send) {
          links->send(t.gradient ? owner.grad(s, b) : owner.output(s, b), t.peer);
        } else {
          links->recv(t.gradient ? owner.grad(s, b) : owner.input(s, b), t.peer);
        }
        touched.emplace_back(t.chunk, s);
        needed = needed || (!t.send && t.chunk == chunk && t.micro_batch == mb);
      }
      const int64_t number = links->issue();
      for (const auto& [c, s] : touched) slot_group[static_cast<size_t>(c)][static_cast<size_t>(s)] = number;
      if (needed) links->join_through(number);
    }
  };
  // Before compute op `i` on (chunk, mb): its groups, once (a load issues its forward's early), before the op takes
  // its slot (an evaluation's slot frees as its output's send is issued).
  std::vector<char> issued(program.size(), 0);
  auto issue_before = [&](size_t i, int chunk, int mb) {
    if (!links || issued[i]) return;
    issued[i] = 1;
    issue(plan.before[i], chunk, mb);
  };
  std::vector<size_t> next_compute(program.size(), program.size());
  for (size_t i = program.size(), next = program.size(); i-- > 0;) {
    const Op op = program[i].op;
    if (op == Op::forward || op == Op::backward || op == Op::backward_input || op == Op::backward_weight) next = i;
    next_compute[i] = next;
  }

  for (size_t i = 0; i < program.size(); ++i) {
    const Instruction& in = program[i];
    const int chunk = in.chunk, mb = in.micro_batch;
    ViTStage* stage = in.micro_batch >= 0 ? chunks_[static_cast<size_t>(chunk)] : nullptr;
    const int vs = virtual_stage(chunk);
    switch (in.op) {
      case Op::load_micro_batch: {
        const int64_t b = size_of(mb);
        if (vs == 0) {
          const int64_t t0 = now();
          MicroBatchData& data = st.loaded[static_cast<size_t>(mb)];
          data = source(mb);
          VP_REQUIRE(data.images.dim(0) == b, "executor: micro-batch ", mb, " has ", data.images.dim(0),
                     " images, the step said ", b);
          issue_before(next_compute[i], chunk, mb);
          const int slot = slot_for(chunk, mb);
          join_slot(chunk, slot);
          stage->backend().copy_from_host(data.images, stage->input(slot, b));
          VP_REQUIRE(!weighted || data.weights.numel() == b * labels, "executor: micro-batch ", mb,
                     " has no label weights, the step said it would");
          if (last_virtual == 0) {
            st.targets[static_cast<size_t>(mb)] = data.targets;
            if (weighted) st.weights[static_cast<size_t>(mb)] = data.weights;
            st.items[static_cast<size_t>(mb)] = data.indices;
          } else {
            // Pack targets (+ weights) + items and send them to the rank holding the last virtual stage.
            auto& bytes = st.label_buffers[static_cast<size_t>(mb)];
            bytes.resize(label_bytes(b));
            std::memcpy(bytes.data(), data.targets.raw(), data.targets.nbytes());
            size_t at = data.targets.nbytes();
            if (weighted) {
              std::memcpy(bytes.data() + at, data.weights.raw(), data.weights.nbytes());
              at += data.weights.nbytes();
            }
            std::vector<int64_t> items = data.indices;
            items.resize(static_cast<size_t>(b), -1);
            std::memcpy(bytes.data() + at, items.data(), items.size() * sizeof(int64_t));
            st.label_sends[static_cast<size_t>(mb)] = world_.isend_bytes(
                bytes.data(), bytes.size(), grid_.rank_of_virtual_stage(last_virtual), label_tag(mb));
            comm.label_bytes += bytes.size();
          }
          record("load", kTraceData, t0, 0, mb);
        }
        if (vs == last_virtual && last_virtual != 0) {
          auto& bytes = st.label_buffers[static_cast<size_t>(mb)];
          bytes.resize(label_bytes(b));
          st.label_recvs[static_cast<size_t>(mb)] =
              world_.irecv_bytes(bytes.data(), bytes.size(), grid_.rank_of_virtual_stage(0), label_tag(mb));
        }
        break;
      }
      case Op::recv_activation: {
        if (links) break;  // NCCL: received where the forward needs it (a receive flushes the held sends)
        const int slot = slot_for(chunk, mb);
        auto& state = st.slots[static_cast<size_t>(chunk)][static_cast<size_t>(slot)];
        const Tensor input = stage->input(slot, size_of(mb));
        state.recv_activation =
            world_.irecv(receive_buffer(*stage, input, state.activation_host), grid_.rank_of_virtual_stage(vs - 1),
                         p2p_tag(MessageKind::activation, mb, chunk, v));
        break;
      }
      case Op::forward: {
        issue_before(i, chunk, mb);
        const int slot = slot_for(chunk, mb);
        auto& state = st.slots[static_cast<size_t>(chunk)][static_cast<size_t>(slot)];
        const int64_t b = size_of(mb);
        int64_t t0 = now();
        timed_wait(state.recv_activation);
        if (links) {
          join_slot(chunk, slot);
          if (vs > 0) record("recv activation", kTraceP2p, t0, 1, mb);
        } else if (vs > 0) {
          upload_received(*stage, stage->input(slot, b), state.activation_host);
          record("recv activation", kTraceP2p, t0, 1, mb);
        }
        t0 = now();
        const auto compute_start = std::chrono::steady_clock::now();
        if (gather_ && gather_->in_flight()) {
          // Sharded optimizer: each segment's parameters arrive from their owners just before it is computed.
          stage->forward(slot, b, [&](int segment) {
            if (gather_->wait_segment(chunk, segment)) stage->parameters_changed(segment, segment);
          });
        } else {
          stage->forward(slot, b);
        }
        if (vs == last_virtual) {
          if (last_virtual != 0) {
            timed_wait(st.label_recvs[static_cast<size_t>(mb)]);
            const auto& bytes = st.label_buffers[static_cast<size_t>(mb)];
            Tensor targets = multi_label ? Tensor::empty({b, labels}) : Tensor::empty({b}, DType::i64);
            std::memcpy(targets.raw(), bytes.data(), targets.nbytes());
            size_t at = targets.nbytes();
            if (weighted) {
              Tensor weights = Tensor::empty({b, labels});
              std::memcpy(weights.raw(), bytes.data() + at, weights.nbytes());
              at += weights.nbytes();
              st.weights[static_cast<size_t>(mb)] = weights;
            }
            std::vector<int64_t> items(static_cast<size_t>(b));
            std::memcpy(items.data(), bytes.data() + at, items.size() * sizeof(int64_t));
            st.targets[static_cast<size_t>(mb)] = targets;
            st.items[static_cast<size_t>(mb)] = std::move(items);
          }
          const Tensor& targets = st.targets[static_cast<size_t>(mb)];
          const Tensor& weights = st.weights[static_cast<size_t>(mb)];
          if (training) {
            result->loss_sum +=
                stage->loss(slot, b, targets, grad_scale, options_.pos_weight.numel() ? &options_.pos_weight : nullptr,
                            weighted ? &weights : nullptr);
            if (weighted) {
              const float* w = weights.f32();
              for (int64_t k = 0; k < b * labels; ++k) result->loss_elements += w[k] != 0.0f ? 1 : 0;
            } else {
              result->loss_elements += multi_label ? b * labels : b;
            }
          } else {
            const Tensor logits = stage->output(slot, b);
            (*sink)(stage->backend().host_accessible() ? logits : to_host(stage->backend(), logits), targets, weights,
                    st.items[static_cast<size_t>(mb)]);
          }
        }
        if (training) result->compute_seconds += seconds_since(compute_start);
        record("forward", kTraceCompute, t0, 0, mb);
        // Evaluation: the slot is done once its output is sent (from a staged copy; over NCCL once the send is issued).
        if (!training && (!links || vs == last_virtual)) state.backward_done = true;
        break;
      }
      case Op::send_activation: {
        const int slot = slot_for(chunk, mb);
        const Tensor output = stage->output(slot, size_of(mb));
        const int64_t t0 = now();
        if (!links) {  // NCCL: sent in the plan's group
          send_staged(stage->backend(), output, grid_.rank_of_virtual_stage(vs + 1),
                      p2p_tag(MessageKind::activation, mb, (vs + 1) / p, v));  // the receiver's chunk
        }
        // Non-blocking: the event is the copy and the posting (value: bytes).
        record("send activation", kTraceP2p, t0, 1, mb, static_cast<int64_t>(output.nbytes()),
               static_cast<int64_t>(output.nbytes()));
        comm.activation_bytes += output.nbytes();
        break;
      }
      case Op::recv_grad: {
        if (links) break;  // NCCL: received where the backward needs it
        const int slot = slot_for(chunk, mb);
        auto& state = st.slots[static_cast<size_t>(chunk)][static_cast<size_t>(slot)];
        const Tensor grad = stage->grad(slot, size_of(mb));
        state.recv_grad =
            world_.irecv(receive_buffer(*stage, grad, state.grad_host), grid_.rank_of_virtual_stage(vs + 1),
                         p2p_tag(MessageKind::gradient, mb, chunk, v));
        break;
      }
      case Op::backward:
      case Op::backward_input: {
        const int slot = slot_for(chunk, mb);
        auto& state = st.slots[static_cast<size_t>(chunk)][static_cast<size_t>(slot)];
        int64_t t0 = now();
        timed_wait(state.recv_grad);
        if (links) {
          issue_before(i, chunk, mb);
          join_slot(chunk, slot);
          if (vs < last_virtual) record("recv grad", kTraceP2p, t0, 1, mb);
        } else if (vs < last_virtual) {
          upload_received(*stage, stage->grad(slot, size_of(mb)), state.grad_host);
          record("recv grad", kTraceP2p, t0, 1, mb);
        }
        t0 = now();
        const auto compute_start = std::chrono::steady_clock::now();
        if (in.op == Op::backward_input) {
          stage->backward_input(slot, size_of(mb));  // the slot stays held until its weight-gradient pass
          buckets_->poll();
        } else if (mb == last_backward[static_cast<size_t>(chunk)]) {
          stage->backward(slot, size_of(mb), [&](int segment) {
            buckets_->mark_ready(segment, chunk);
            buckets_->poll();
          });
        } else {
          stage->backward(slot, size_of(mb));
          buckets_->poll();
        }
        result->compute_seconds += seconds_since(compute_start);
        record(in.op == Op::backward ? "backward" : "backward input", kTraceCompute, t0, 0, mb);
        if (in.op == Op::backward) state.backward_done = true;
        break;
      }
      case Op::backward_weight: {
        const int slot = slot_for(chunk, mb);
        auto& state = st.slots[static_cast<size_t>(chunk)][static_cast<size_t>(slot)];
        issue_before(i, chunk, mb);
        join_slot(chunk, slot);
        const int64_t t0 = now();
        const auto compute_start = std::chrono::steady_clock::now();
        if (mb == last_backward[static_cast<size_t>(chunk)]) {
          stage->backward_weight(slot, size_of(mb), [&](int segment) {
            buckets_->mark_ready(segment, chunk);
            buckets_->poll();
          });
        } else {
          stage->backward_weight(slot, size_of(mb));
          buckets_->poll();
        }
        result->compute_seconds += seconds_since(compute_start);
        record("backward weight", kTraceCompute, t0, 0, mb);
        state.backward_done = true;
        break;
      }
      case Op::send_grad: {
        const int slot = slot_for(chunk, mb);
        const Tensor grad = stage->grad(slot, size_of(mb));
        const int64_t t0 = now();
        if (!links) {  // NCCL: sent in the plan's group
          send_staged(stage->backend(), grad, grid_.rank_of_virtual_stage(vs - 1),
                      p2p_tag(MessageKind::gradient, mb, (vs - 1) / p, v));  // the receiver's chunk
        }
        record("send grad", kTraceP2p, t0, 1, mb, static_cast<int64_t>(grad.nbytes()),
               static_cast<int64_t>(grad.nbytes()));
        comm.activation_grad_bytes += grad.nbytes();
        break;
      }
      case Op::reduce_grads: {
        const int64_t t0 = now();
        buckets_->finish();
        record("gradient all-reduce wait", kTraceAllReduce, t0, 1, -1);
        break;
      }
      case Op::optimizer_step:
        break;  // the trainer steps (it clips by the global norm across stages first)
    }
  }
  // Every message of the step is through before its buffers are touched again.
  if (links) {
    issue(plan.after, -1, -1);  // nothing more runs: no join needed before finish()
    links->finish();
  }
  for (auto& send : st.staged_sends) timed_wait(send.request);
  for (auto& chunk_slots : st.slots) {
    for (auto& state : chunk_slots) {
      timed_wait(state.recv_activation);
      timed_wait(state.recv_grad);
    }
  }
  for (auto& request : st.label_sends) timed_wait(request);
  for (auto& request : st.label_recvs) timed_wait(request);
  while (!deferred.backends.empty()) {
    Backend* b = deferred.backends.back();
    deferred.backends.pop_back();
    result->loss_sum += take_losses(*b);
  }
}

int activation_slots_needed(ScheduleKind kind, int stages, int micro_batches, int stage, int virtual_stages) {
  // Over NCCL too: transfer_plan.h never takes a slot before the host path would (TransferPlan.* checks it).
  const SimulationResult simulated = simulate_schedule(kind, stages, micro_batches, virtual_stages);
  return std::max(1, simulated.peak_in_flight.at(static_cast<size_t>(stage)));
}

}  // namespace vitpipe
