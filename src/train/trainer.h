// `vitpipe train`: fine-tunes a model on a dataset, on one process or on every rank of an MPI job (pipeline stages
// x data-parallel replicas), evaluates on the validation split, checkpoints, resumes and exports the best model in
// Hugging Face format. One code path: a single process is a pipeline of one stage and one replica.
#pragma once

#include "train/train_options.h"

namespace vitpipe {

// Runs the whole job described by `options` (as resolved by TrainOptionsParser). Under mpirun every process calls
// this; without mpirun a pipeline of P stages runs as P threads of this process. Returns the exit status: 0 when
// training ran to its end, 128 + the signal's number when SIGINT, SIGTERM or SIGUSR1 stopped it at a step boundary
// with a checkpoint (util/stop_request.h).
int run_training(const TrainOptions& options);

}  // namespace vitpipe
