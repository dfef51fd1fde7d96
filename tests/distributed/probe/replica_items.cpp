// Prints the image files one data-parallel replica loads for one training step, as `vitpipe train` plans them
// (same dataset options, same seeded epoch order, same slice per replica). The failure test uses it to corrupt an
// image that only one rank of an mpirun job reads.
//
//   replica_items DATA_SPEC --batch-size B --replicas R --replica r --step k [--seed S] [--val-fraction F]
#include <CLI/CLI.hpp>
#include <cstdio>

#include "data/data_spec.h"
#include "data/epoch_plan.h"
#include "util/error.h"

int main(int argc, char** argv) {
  CLI::App app("Image files of replica r in step k of epoch 0");
  std::string spec;
  int64_t batch_size = 0, step = 0;
  int replicas = 1, replica = 0;
  uint64_t seed = 42, data_seed = 0;
  double val_fraction = 0.1;
  app.add_option("data", spec)->required();
  app.add_option("--batch-size", batch_size)->required();
  app.add_option("--replicas", replicas)->required();
  app.add_option("--replica", replica)->required();
  app.add_option("--step", step)->required();
  app.add_option("--seed", seed);
  app.add_option("--data-seed", data_seed);
  app.add_option("--val-fraction", val_fraction);
  CLI11_PARSE(app, argc, argv);
  try {
    vitpipe::DatasetOptions options;
    options.val_fraction = val_fraction;
    options.seed = data_seed;
    const auto dataset = vitpipe::open_dataset(spec, options);
    vitpipe::EpochPlanOptions plan_options;
    plan_options.global_batch_size = batch_size;
    plan_options.replica_index = replica;
    plan_options.replica_count = replicas;
    plan_options.seed = seed;
    plan_options.partial_batch = vitpipe::PartialBatch::drop;
    const vitpipe::EpochPlan plan(dataset->split_indices(vitpipe::Split::train), 0, plan_options);
    VP_REQUIRE(step < plan.batches(), "step ", step, " is past epoch 0 (", plan.batches(), " batches)");
    for (int64_t item : plan.batch(step).items) std::printf("%s\n", dataset->file_path(item).string().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
