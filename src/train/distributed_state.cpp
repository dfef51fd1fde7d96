#include "train/distributed_state.h"

#include <cstring>

#include "util/error.h"

namespace vitpipe {
namespace {

// Per chunk: the parameters' begin, numel and values (numel 0 where this rank does not send them), then the optimizer
// buffers' begin, numel and each buffer (name order), as raw floats.
std::vector<std::byte> pack(const std::vector<ViTStage*>& chunks, const std::vector<Optimizer*>& optimizers,
                            bool send_parameters, bool send_optimizer) {
  std::vector<std::byte> bytes;
  auto append = [&](const void* data, size_t size) {
    const auto* p = static_cast<const std::byte*>(data);
    bytes.insert(bytes.end(), p, p + size);
  };
  // Parameters and optimizer moments are the backend's memory (a GPU's): copied out through it.
  auto append_from = [&](Backend& backend, const Tensor& t) {
    const size_t at = bytes.size();
    bytes.resize(at + t.nbytes());
    if (t.nbytes() > 0) backend.copy_to_host(t, Tensor::wrap(bytes.data() + at, t.shape(), t.dtype()));
  };
  const int64_t count = static_cast<int64_t>(chunks.size());
  append(&count, sizeof(count));
  for (size_t c = 0; c < chunks.size(); ++c) {
    const FlatParameters& params = chunks[c]->parameters();
    const int64_t begin = params.begin(), numel = send_parameters ? params.numel() : 0;
    append(&begin, sizeof(begin));
    append(&numel, sizeof(numel));
    if (numel > 0) append_from(chunks[c]->backend(), params.flat());
    const Optimizer* optimizer = send_optimizer && !optimizers.empty() ? optimizers[c] : nullptr;
    const int64_t state_begin = optimizer ? optimizer->range_begin() : 0;
    const int64_t state_numel = optimizer ? optimizer->range_end() - optimizer->range_begin() : 0;
    append(&state_begin, sizeof(state_begin));
    append(&state_numel, sizeof(state_numel));
    if (optimizer) {
      for (const auto& [name, tensor] : optimizer->state_tensors()) append_from(optimizer->backend(), tensor);
    }
  }
  return bytes;
}

}  // namespace

GatheredState gather_state(Communicator& world, const ProcessGrid& grid, const std::vector<ViTStage*>& chunks,
                           const std::vector<Optimizer*>& optimizers) {
  // Replicas hold identical parameters: replica 0's stages send them. Optimizer state: replica 0's too, unless it
  // is sharded across the replicas, when every replica sends its shard.
  bool sharded = false;
  for (size_t c = 0; c < optimizers.size(); ++c) {
    sharded = sharded || optimizers[c]->range_end() - optimizers[c]->range_begin() != chunks[c]->parameters().numel();
  }
  const bool shards = world.allreduce(sharded ? 1.0 : 0.0, ReduceOp::max) > 0;
  const std::vector<std::byte> mine = pack(chunks, optimizers, grid.replica() == 0, shards || grid.replica() == 0);
  auto gathered = world.gather_bytes(mine, 0);
  GatheredState out;
  if (world.rank() != 0) return out;
  auto layout = chunks.front()->parameters().layout_ptr();
  out.parameters = FlatParameters::whole_model(layout);
  std::vector<std::string> names;
  if (!optimizers.empty()) {
    for (const auto& [name, tensor] : optimizers.front()->state_tensors()) {
      names.push_back(name);
      out.optimizer_state[name] = Tensor::zeros({layout->numel()});
    }
    out.optimizer_metadata = optimizers.front()->state_metadata();
    // The whole-model buffers cover every segment.
    out.optimizer_metadata["first_segment"] = "0";
    out.optimizer_metadata["last_segment"] = std::to_string(layout->num_segments() - 1);
    out.optimizer_metadata["begin"] = "0";
    out.optimizer_metadata["numel"] = std::to_string(layout->numel());
  }
  int64_t covered = 0, state_covered = 0;
  for (const auto& bytes : gathered) {
    if (bytes.empty()) continue;
    size_t at = 0;
    auto read = [&](void* dst, size_t size) {
      VP_REQUIRE(at + size <= bytes.size(), "gather_state: truncated message");
      std::memcpy(dst, bytes.data() + at, size);
      at += size;
    };
    int64_t count = 0;
    read(&count, sizeof(count));
    for (int64_t c = 0; c < count; ++c) {
      int64_t begin = 0, numel = 0, state_begin = 0, state_numel = 0;
      read(&begin, sizeof(begin));
      read(&numel, sizeof(numel));
      VP_REQUIRE(begin >= 0 && numel >= 0 && begin + numel <= layout->numel(), "gather_state: range outside the model");
      read(out.parameters.data() + begin, static_cast<size_t>(numel) * sizeof(float));
      covered += numel;
      read(&state_begin, sizeof(state_begin));
      read(&state_numel, sizeof(state_numel));
      VP_REQUIRE(state_begin >= 0 && state_numel >= 0 && state_begin + state_numel <= layout->numel(),
                 "gather_state: optimizer range outside the model");
      if (state_numel == 0) continue;
      for (const auto& name : names) {
        read(out.optimizer_state[name].f32() + state_begin, static_cast<size_t>(state_numel) * sizeof(float));
      }
      state_covered += state_numel;
    }
  }
  VP_REQUIRE(covered == layout->numel(), "gather_state: the stages cover ", covered, " of ", layout->numel(),
             " parameters");
  VP_REQUIRE(names.empty() || state_covered == layout->numel(), "gather_state: the optimizer shards cover ",
             state_covered, " of ", layout->numel(), " parameters");
  return out;
}

void load_chunk_state(ViTStage& chunk, Optimizer* optimizer, const FlatParameters& whole, const TensorMap& state,
                      const StringMap& metadata, const std::string& source) {
  FlatParameters& params = chunk.parameters();
  VP_REQUIRE(whole.numel() == params.layout().numel(), source, ": the checkpoint holds ", whole.numel(),
             " parameters, the model ", params.layout().numel());
  const int64_t from = params.begin() - whole.begin();
  chunk.backend().copy_from_host(whole.flat().slice(from, from + params.numel()), params.flat());
  chunk.parameters_changed();
  if (optimizer == nullptr) return;
  VP_REQUIRE(!state.empty(), source, ": no optimizer state to resume from");
  TensorMap views;  // the optimizer's elements: the chunk's range, or its shard of it
  for (const auto& [name, tensor] : state) {
    views[name] = tensor.slice(optimizer->range_begin(), optimizer->range_end());
  }
  StringMap meta = optimizer->state_metadata();    // this chunk's range ...
  for (const char* key : {"optimizer", "step"}) {  // ... and what the checkpoint says about the run
    auto it = metadata.find(key);
    VP_REQUIRE(it != metadata.end(), source, ": optimizer metadata lacks \"", key, "\"");
    meta[key] = it->second;
  }
  optimizer->load_state(views, meta, source);
}

}  // namespace vitpipe
