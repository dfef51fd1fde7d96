// "Stop soon" for `vitpipe train`: SIGINT, SIGTERM and SIGUSR1 (Ctrl-C, a scheduler's time limit or preemption,
// Slurm's `--signal`) ask the run to stop at the next step boundary with a checkpoint, and exit with status
// 128 + the signal's number (130, 143, 138). The handler only sets a flag and write()s one line (async-signal-safe);
// the trainer reads the flag at each step boundary, the ranks agree on it with one reduction, and the run ends on
// its ordinary path (checkpoint, MPI_Finalize, return from main). No other thread ends the process for a signal.
// A second SIGINT stops at once (_exit(130)): the checkpoint being written, if any, is a temporary that is never
// renamed into place, so the last complete one stays. A second SIGTERM or SIGUSR1 changes nothing.
#pragma once

namespace vitpipe {

// Installs the handlers (idempotent; call after MPI_Init, which may install its own).
void install_stop_handlers();

// The first stop signal received, or 0.
int stop_signal();

// The exit status of a run stopped by `signal`: 128 + signal.
constexpr int stop_exit_status(int signal) { return 128 + signal; }

// "SIGINT", "SIGTERM", "SIGUSR1" (or "signal N").
const char* stop_signal_name(int signal);

}  // namespace vitpipe
