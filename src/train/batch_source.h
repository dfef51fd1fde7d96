// A loader batch (data/loader.h) seen as the executor's micro-batches: consecutive row ranges of the given sizes.
#pragma once

#include <vector>

#include "data/loader.h"
#include "parallel/pipeline_executor.h"

namespace vitpipe {

// The source stays valid as long as `batch` and `sizes` do. Single-label targets become [b] int64 class ids.
MicroBatchSource micro_batches_of(const Batch& batch, const std::vector<int64_t>& sizes, bool multi_label);

}  // namespace vitpipe
