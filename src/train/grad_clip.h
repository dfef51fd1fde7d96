// Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_ (norm_type 2): scale every gradient by
// min(1, max_norm / (norm + 1e-6)). In a pipeline each stage holds only part of the gradient, so the executor
// computes sum_of_squares() per stage, all-reduces the sums, and calls scale() with clip_factor() of the total;
// clip_grad_norm() is the one-process shortcut. Sums are in double, per fixed chunk, added in chunk order.
// The work runs behind the backend that holds the gradients (Backend::sum_of_squares, Backend::scale): only the
// double sum comes back to the host. The overloads without a backend are for host gradients (host_backend()).
#pragma once

#include "backend/backend.h"
#include "model/parameter_layout.h"

namespace vitpipe {

// sum of g^2 over the range, in double (OpenMP-parallel; the bits do not depend on the thread count).
double sum_of_squares(const FlatParameters& grads);
// g *= factor (as fp32).
void scale(FlatParameters& grads, double factor);
// The same over elements [begin, end) (model offsets) only: a sharded optimizer's slice.
double sum_of_squares(const FlatParameters& grads, int64_t begin, int64_t end);
void scale(FlatParameters& grads, double factor, int64_t begin, int64_t end);
// The same through `backend`, which holds the gradients.
double sum_of_squares(Backend& backend, const FlatParameters& grads, int64_t begin, int64_t end);
void scale(Backend& backend, const FlatParameters& grads, double factor, int64_t begin, int64_t end);
// torch's rule: min(1, max_norm / (total_norm + 1e-6)); 1 when the norm is not finite (nothing sensible to scale by:
// the caller should skip the step).
double clip_factor(double total_norm, double max_norm);
// Clips in place when the norm exceeds max_norm and returns the norm before clipping.
double clip_grad_norm(FlatParameters& grads, double max_norm);

}  // namespace vitpipe
