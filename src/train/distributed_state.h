// Moving whole-model state between the ranks of a pipeline x data-parallel job: rank 0 assembles the parameters
// (and optimizer moments) from replica 0's stages for checkpoints and exports; every rank takes its chunks' part of
// a whole-model checkpoint when resuming, whatever layout wrote it.
#pragma once

#include <vector>

#include "io/named_tensors.h"
#include "model/vit_stage.h"
#include "parallel/communicator.h"
#include "parallel/process_grid.h"
#include "train/optimizer.h"

namespace vitpipe {

struct GatheredState {
  FlatParameters parameters;  // whole model (rank 0 only)
  TensorMap optimizer_state;  // name -> whole-model f32 buffer (rank 0 only; empty without optimizers)
  StringMap optimizer_metadata;
};

// Collective over `world`. `optimizers` parallel to `chunks`, or empty to gather parameters only.
GatheredState gather_state(Communicator& world, const ProcessGrid& grid, const std::vector<ViTStage*>& chunks,
                           const std::vector<Optimizer*>& optimizers);

// Copies this chunk's range out of whole-model buffers (no communication).
void load_chunk_state(ViTStage& chunk, Optimizer* optimizer, const FlatParameters& whole_parameters,
                      const TensorMap& whole_optimizer_state, const StringMap& optimizer_metadata,
                      const std::string& source);

}  // namespace vitpipe
