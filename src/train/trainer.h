// `vitpipe train`: fine-tunes a model on a dataset, on one process or on every rank of an MPI job (pipeline stages
// x data-parallel replicas), evaluates on the validation split, checkpoints, resumes and exports the best model in
// Hugging Face format. One code path: a single process is a pipeline of one stage and one replica.
#pragma once

#include <functional>
#include <memory>

#include "backend/backend.h"
#include "train/train_options.h"

namespace vitpipe {

// Runs the whole job described by `options` (as resolved by TrainOptionsParser). Under mpirun every process calls
// this; without mpirun a pipeline of P stages runs as P threads of this process.
void run_training(const TrainOptions& options);

// A test hook (tools/train_seam_probe.cpp, proof 3 of issue 24): when set, every stage backend the trainer makes is
// passed through `wrap` (e.g. into tools/seam_backend.h's SeamBackend) before any tensor reaches it. Empty: none.
// Set it before run_training, from one thread.
using TrainingBackendWrapper = std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)>;
void set_training_backend_wrapper(TrainingBackendWrapper wrap);

}  // namespace vitpipe
