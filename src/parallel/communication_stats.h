// What one rank communicated in one training step, by kind, and how much of it the rank waited for. Bytes are the
// payloads handed to the communicator (exact for messages; for collectives the buffer reduced or gathered), and
// wire_bytes() what a ring algorithm would send over this rank's link for them, the usual cost model of bandwidth-
// bound collectives (MPI may choose other algorithms; the payloads are what is measured).
#pragma once

#include <cstddef>

namespace vitpipe {

struct CommunicationStats {
  size_t activation_bytes = 0;       // hidden states sent to the next stage
  size_t activation_grad_bytes = 0;  // their gradients sent to the previous stage
  size_t label_bytes = 0;            // labels and item ids, first stage -> last
  size_t allreduce_bytes = 0;        // gradients all-reduced across replicas
  size_t reduce_scatter_bytes = 0;   // gradients reduce-scattered to their shards' owners (--shard-optimizer)
  size_t allgather_bytes = 0;        // parameters all-gathered from their shards' owners (--shard-optimizer)
  int replicas = 1;                  // members of the data-parallel group

  // Seconds this rank spent waiting on point-to-point messages: for an activation or gradient that had not arrived
  // (the neighbour's compute included: in a pipeline most of this is the bubble) and for sends to complete.
  double p2p_wait_seconds = 0;
  // Collectives: from the first launch to the last completion (window) and the part of it this rank spent inside
  // their calls (exposed; MPI moves non-blocking collectives only inside its calls). Hidden = window - exposed.
  double collective_window_seconds = 0;
  double collective_exposed_seconds = 0;

  size_t p2p_bytes() const { return activation_bytes + activation_grad_bytes + label_bytes; }
  double wire_bytes() const {
    const double r = replicas > 1 ? static_cast<double>(replicas) : 1.0;
    const double share = replicas > 1 ? (r - 1.0) / r : 0.0;
    return static_cast<double>(p2p_bytes()) + 2.0 * share * static_cast<double>(allreduce_bytes) +
           share * static_cast<double>(reduce_scatter_bytes + allgather_bytes);
  }
  double collective_hidden_seconds() const {
    return collective_window_seconds > collective_exposed_seconds
               ? collective_window_seconds - collective_exposed_seconds
               : 0.0;
  }
};

}  // namespace vitpipe
