#include "train/batch_source.h"

namespace vitpipe {

MicroBatchSource micro_batches_of(const Batch& batch, const std::vector<int64_t>& sizes, bool multi_label) {
  std::vector<int64_t> offsets(sizes.size(), 0);
  for (size_t i = 1; i < offsets.size(); ++i) offsets[i] = offsets[i - 1] + sizes[i - 1];
  return [&batch, &sizes, offsets, multi_label](int mb) {
    const int64_t begin = offsets[static_cast<size_t>(mb)];
    const int64_t end = begin + sizes[static_cast<size_t>(mb)];
    MicroBatchData data;
    data.images = batch.images.slice(begin, end);
    if (multi_label) {
      data.targets = batch.labels.slice(begin, end);
      if (batch.label_weights.numel() > 0) data.weights = batch.label_weights.slice(begin, end);
    } else {
      data.targets = Tensor::empty({end - begin}, DType::i64);
      for (int64_t r = begin; r < end; ++r) {
        data.targets.data<int64_t>()[r - begin] = batch.classes[static_cast<size_t>(r)];
      }
    }
    data.indices.assign(batch.indices.begin() + begin, batch.indices.begin() + end);
    return data;
  };
}

}  // namespace vitpipe
