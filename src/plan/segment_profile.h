// What one pipeline segment costs on this CPU or GPU, measured: the forward pass, the whole backward pass and its two
// halves (input gradients B, weight gradients W: model/weight_gradients.h) of the embeddings, an encoder block,
// the final (classifier-token) block and the head, at a few micro-batch sizes, with the threads one rank would
// use and in the run's training mode (model/trainable_set.h: a frozen segment below the backward path runs forward
// only, LoRA's B and W passes are its own). Measured once (a few micro-batches each, the median of a few runs) and
// cached per model, image size, precision, CPU and thread count (on a GPU: per GPU, compute capability, memory and the
// loaded CUDA libraries' versions); the planner (layout_search.h) interpolates between the sizes. On a GPU each pass
// is timed between two waits for the device (a one-element copy to the host, as `bench` ends its timed steps) after
// two warm-up runs (cuDNN and cuBLASLt choose and build their engines on first use).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/parameter_layout.h"
#include "model/precision.h"
#include "model/trainable_set.h"
#include "model/vit_config.h"
#include "tensor/tensor.h"  // Device

namespace vitpipe {

enum class SegmentKind { embeddings, block, classifier_block, head };

struct PassTimes {  // seconds for one micro-batch
  double forward = 0, backward = 0, backward_input = 0, backward_weight = 0;
};

struct ProfilePoint {
  int64_t micro_batch = 1;
  PassTimes embeddings, block, classifier_block, head;
  const PassTimes& of(SegmentKind kind) const;
};

struct ModelProfile {
  std::string key;                   // what it was measured for (model, precision, CPU, threads)
  nlohmann::json describe;           // the same, readable
  std::vector<ProfilePoint> points;  // ascending micro-batch
  // The same sizes measured by one rank while the others waited without using a core (empty when only one rank
  // measured). Beside `points`, they say what a pass gains when the other ranks are not computing: the planner
  // costs each pass between the two by how much of it overlaps the others' work (layout_search.h).
  std::vector<ProfilePoint> alone_points;
  int measured_together = 1;  // how many ranks measured `points` at once (the whole job's)
  // Optimizer update cost per parameter element (seconds), by optimizer name ("adamw", "lamb", "sgd").
  std::map<std::string, double> optimizer_seconds_per_element;
  // How many ranks measured it at once on one node (train --layout auto: every rank of the job, the slowest kept),
  // so the times already include sharing the node's cores and memory bandwidth among that many ranks.
  int corunning_ranks = 1;

  // Times at micro-batch b: linear between the measured sizes, proportional beyond the largest.
  PassTimes at(SegmentKind kind, double micro_batch) const;
  // The same from `alone_points`; only when has_alone().
  PassTimes alone_at(SegmentKind kind, double micro_batch) const;
  bool has_alone() const;  // alone_points hold every size of `points`
  bool covers(int64_t micro_batch) const;
  nlohmann::json to_json() const;
  static ModelProfile from_json(const nlohmann::json& json, const std::string& source);
};

struct ProfileRequest {
  ViTConfig config;  // image size, labels and problem type applied
  Precision precision = Precision::fp32;
  TrainingMode mode;                   // full fine-tuning, a frozen backbone or layers, LoRA
  int threads = 1;                     // CPU threads per rank
  int corunning_ranks = 1;             // ranks measuring at the same time on this node (see ModelProfile)
  int measured_together = 1;           // ranks measuring at the same time in the whole job
  std::vector<int64_t> micro_batches;  // sizes the plan needs
  std::filesystem::path cache_dir;     // "" = no cache
  // Device::cuda: measured on the CUDA backend (backend/device_selection.h's make_backend, this process's GPU).
  Device device = Device::cpu;
  bool allow_tf32 = false;  // cuda: fp32 GEMMs on TF32 tensor cores (part of the key: it changes their speed)
  nlohmann::json gpu;       // cuda: the GPU and the loaded libraries (describe_profile_gpu()), part of the key
};

// The cache key of a request (model dimensions, precision, training mode, then the CPU brand, kernel level and
// threads, or on cuda the GPU, its libraries and TF32).
std::string profile_key(const ProfileRequest& request);

// The cache file of a request in its cache_dir (empty without one): named by a hash of its key.
std::filesystem::path profile_cache_file(const ProfileRequest& request);

// This process's GPU (name, compute capability, memory) and the CUDA libraries the module loaded, with the driver's
// version: what a cuda profile is keyed by. Requires a usable CUDA backend (select_device(cuda) passed).
nlohmann::json describe_profile_gpu();

// Measures the optimizers' update cost per element on a range of `layout` (the training layer provides it).
using OptimizerTimer =
    std::function<std::map<std::string, double>(const std::shared_ptr<const ParameterLayout>& layout)>;

// What is still to measure for a request: the sizes its cache lacks, and the optimizer costs when absent.
struct ProfileWork {
  std::vector<int64_t> micro_batches;
  bool optimizers = false;
  bool empty() const { return micro_batches.empty() && !optimizers; }
};

// Reduces the flat measurements of ranks measuring the same work at the same time (element-wise max: the slowest
// rank's times); every one of them calls it once, in the same order.
using ProfileCombine = std::function<void(std::vector<double>& values)>;

// Before the ranks measure together, one of them measures the same sizes alone while the others wait without
// using a core; `share` then hands its times from that rank to every other (each calls it once, in the same order;
// the measuring rank's call sends, the others' receive into the vector).
struct AloneTurn {
  bool measures = false;
  std::function<void(std::vector<double>& values)> share;
};

// Measures `work` for `request` (threads and training mode applied). With `combine`, the other ranks measuring
// alongside call this too, with the same work, and every rank gets the combined times; with `alone`, the alone
// times first (ModelProfile::alone_points).
ModelProfile measure_profile_work(const ProfileRequest& request, const ProfileWork& work,
                                  const OptimizerTimer& time_optimizers, const ProfileCombine& combine = {},
                                  const AloneTurn& alone = {});

// The cached profile when it covers every requested size; otherwise measures the missing sizes (and the optimizer
// costs when absent), merges and writes the cache atomically. `measured` (optional) tells whether it measured.
// `work_known` (optional) is told what is to measure before measuring starts (to start the ranks measuring
// alongside); `combine` as in measure_profile_work.
ModelProfile load_or_measure_profile(const ProfileRequest& request, const OptimizerTimer& time_optimizers,
                                     bool* measured = nullptr,
                                     const std::function<void(const ProfileWork&)>& work_known = {},
                                     const ProfileCombine& combine = {}, const AloneTurn& alone = {});

// The default cache directory: $VITPIPE_CACHE, else $XDG_CACHE_HOME/vitpipe, else ~/.cache/vitpipe.
std::filesystem::path default_profile_cache();

}  // namespace vitpipe
