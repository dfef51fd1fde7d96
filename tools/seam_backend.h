// Proof 3 of issue 24, the host/device seam, on the CPU: a Backend that treats every tensor it is handed as device
// memory. Between its calls the pages those tensors cover are PROT_NONE, so a host read or write of them from any
// layer above the backend faults; a SIGSEGV handler records where (the call stack) and opens the pages again so the
// run goes on, and the next backend call closes them. Inside a call the wrapped CPU backend works on them as usual.
// Only whole pages inside a tensor are closed (a page shared with other memory must stay usable), so tensors smaller
// than a page, and the edges of larger ones, are not watched: the report says how many bytes were.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace vitpipe {

class SeamBackend;

// The watch shared by every SeamBackend of the process (the SIGSEGV handler is process-wide).
struct SeamReport {
  int64_t regions = 0;        // distinct page ranges closed
  int64_t watched_bytes = 0;  // bytes in them
  int64_t handed_bytes = 0;   // bytes of every distinct tensor handed to the backend
  int64_t touches = 0;        // host accesses between calls (each counted once per reopening)
};

// What is closed between calls: every tensor handed to the backend, or only the training state (the tensors handed
// to the optimizer, gradient-norm, zeroing and host-copy ops: parameters, gradients, moment buffers), which leaves
// the activations, images and labels a trainer exchanges with the host open. The mode is the process's (the first
// SeamBackend made sets it).
enum class SeamWatch { all, training_state };

std::unique_ptr<Backend> make_seam_backend(std::unique_ptr<Backend> inner, SeamWatch watch = SeamWatch::all);
// Stops watching: every page opened, nothing closed again (the dump after the step reads device memory as a copy
// to the host would).
void seam_release();
SeamReport seam_report();
// The touches, each with its call stack, to `out`.
void seam_print_touches(std::FILE* out);

}  // namespace vitpipe
