// A CPU interpreter of NCCL calls over simulated ranks, each with its own host buffers. Groups run in lockstep: group
// g of every rank together. Within a group the collectives must be the same on every rank, in the same order (NCCL
// hangs or corrupts otherwise), and every send must meet a recv of the same count and type from its peer in the same
// group (across groups it would deadlock). Sums are taken in double in rank order and rounded once.
#pragma once

#include <vector>

#include "backend/cuda/calls/nccl_call.h"

namespace vitpipe::cuda {

// programs[r] = rank r's groups, in issue order. Throws std::invalid_argument naming the first mismatch.
void interpret_nccl(const std::vector<std::vector<NcclGroup>>& programs);

}  // namespace vitpipe::cuda
