// How an optimizer (or a gradient-norm pass) walks a segment range. The range is cut into fixed chunks on the whole
// model's offset grid (model offset / kUpdateChunk) and each chunk further into pieces at parameter boundaries.
// Threads take whole chunks (schedule static), so two threads never write one cache line as long as the range
// begins on a 16-float boundary (it does whenever hidden_size is a multiple of 16). Sums (LAMB's per-tensor norms,
// the gradient norm) are kept per piece and added in piece order, and a piece is the same whether a stage or the
// whole model is stepped: the results depend neither on the thread count nor on the pipeline split.
#pragma once

#include <cstdint>
#include <vector>

#include "model/parameter_layout.h"

namespace vitpipe {

constexpr int64_t kUpdateChunk = 8192;  // elements: 32 KiB of each streamed array

struct UpdateParam {
  const ParamSpec* spec = nullptr;
  double lr_scale = 1.0;  // layer-wise learning-rate factor of its segment
  bool decays = false;    // gets weight decay (and, in LAMB, the trust ratio)
};

struct UpdatePiece {
  int64_t begin = 0;  // offsets into the range's buffer
  int64_t end = 0;
  int32_t param = 0;  // index into UpdatePlan::params()
};

class UpdatePlan {
 public:
  UpdatePlan() = default;
  // `lr_scales` has one factor per segment of the model; `decay_all` overrides ParamSpec::decays(). The plan covers
  // elements [begin, end) (model offsets) of the segment range, the whole range by default (-1): an optimizer
  // shard's slice. Offsets in pieces are relative to `begin`.
  UpdatePlan(const ParameterLayout& layout, int first_segment, int last_segment, const std::vector<double>& lr_scales,
             bool decay_all, int64_t begin = -1, int64_t end = -1);

  const std::vector<UpdateParam>& params() const { return params_; }
  const std::vector<UpdatePiece>& pieces() const { return pieces_; }
  int64_t num_chunks() const { return static_cast<int64_t>(chunk_first_piece_.size()) - 1; }
  // The first piece of each chunk, then the piece count (num_chunks + 1 entries): the backend's work items.
  const std::vector<int64_t>& chunk_first_piece() const { return chunk_first_piece_; }
  int64_t numel() const { return numel_; }

  // fn(piece_index, piece) for every piece; chunks are spread over the OpenMP threads.
  template <class Fn>
  void for_each_piece(Fn&& fn) const {
    const int64_t chunks = num_chunks();
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      for (int64_t i = chunk_first_piece_[c]; i < chunk_first_piece_[c + 1]; ++i) fn(i, pieces_[i]);
    }
  }

 private:
  std::vector<UpdateParam> params_;
  std::vector<UpdatePiece> pieces_;
  std::vector<int64_t> chunk_first_piece_;  // num_chunks + 1 entries
  int64_t numel_ = 0;
};

// Chunk boundaries of a range that starts at `model_begin` and holds `numel` elements: local offsets, first 0,
// last numel (the grid of UpdatePlan without the parameter cuts).
std::vector<int64_t> update_chunk_bounds(int64_t model_begin, int64_t numel);

}  // namespace vitpipe
