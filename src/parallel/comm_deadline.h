// The deadline on every blocking communication of an MPI rank (`vitpipe train --comm-timeout SECONDS`).
//
// Open MPI 4.1 waits for ever on a peer behind a cut link or on a dead host: a cut link is silence, not an error
// (no ULFM, no heartbeat). A watchdog thread that makes no MPI calls watches the one blocking operation the rank is
// in; past the deadline it writes one line, `error: rank R: <operation and peer> did not complete in T s ...
// [host H]`, to stderr and appends it to the failure log in the output directory (a remote rank's stderr travels
// over the cut link to mpirun and is lost with it), then ends the process with _exit(1): MPI_Abort may itself
// block on the cut link, and may not be called from a second thread under MPI_THREAD_FUNNELED. The local daemon
// sees the rank die and mpirun takes the rest of the job down.
#pragma once

#include <chrono>
#include <string>

namespace vitpipe {

constexpr double kDefaultCommTimeoutSeconds = 300;

// Where the deadline comes from: --comm-timeout when given (`flag_seconds` >= 0), else the environment variable
// VITPIPE_COMM_TIMEOUT, else kDefaultCommTimeoutSeconds. 0 = no deadline. Throws naming the variable when it does
// not hold seconds.
double resolve_comm_timeout(double flag_seconds);

// Set before MPI starts (run_training). `failure_log`: the file each rank appends its line to ("" = stderr only).
void configure_comm_deadline(double seconds, const std::string& failure_log);
double comm_timeout_seconds();

// This process's rank in MPI_COMM_WORLD and its host, for the line; also applies resolve_comm_timeout(-1) when
// configure_comm_deadline was not called, and starts the watchdog. From then on a SIGTERM (how mpirun's daemons end
// ranks; a stop request, util/stop_request.h) also appends a line to the failure log with the operation the rank was
// waiting in; the rank stops on the trainer's path, not from the watchdog. The host is named by its
// hostname and its non-loopback IPv4 addresses: network namespaces (and cloned VMs) share hostnames, so a name
// alone may not say which machine it is.
void set_comm_deadline_rank(int world_rank);
const std::string& this_host_identity();

// Stops and joins the watchdog (after MPI_Finalize): the exit path then runs on the main thread alone.
void end_comm_watchdog();

// Marks the calling thread (MPI's thread) as blocked in `what` from now until the object is destroyed; the
// watchdog ends the process when that lasts longer than the deadline. One at a time; before
// set_comm_deadline_rank nothing watches.
class BlockingCommunication {
 public:
  explicit BlockingCommunication(std::string what);
  ~BlockingCommunication();
  BlockingCommunication(const BlockingCommunication&) = delete;
  BlockingCommunication& operator=(const BlockingCommunication&) = delete;
};

// Writes "error: rank R: REASON [host H]" to stderr and appends it to the failure log (O_APPEND, fsync). The log's
// directory is made only for a deadline that expired (`create_output_directory`); other failures are logged there only
// once the run has made it, so a configuration refused at the start leaves no output directory.
void report_rank_failure(const std::string& reason, bool create_output_directory = false, bool to_stderr = true);

}  // namespace vitpipe
