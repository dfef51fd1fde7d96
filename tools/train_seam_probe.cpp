// Proof 3 of issue 24 for the trainer: `train_seam_probe TRAIN-FLAGS...` runs `vitpipe train TRAIN-FLAGS...` in this
// process; `train_seam_probe predict|explain FLAGS...` runs that command (src/cli/cmd_predict.cpp, cmd_explain.cpp).
// With VITPIPE_PROBE_SEAM=1 every backend make_cpu_backend() makes (the trainer's stages, the explainer of the final
// heatmaps) is a SeamBackend (tools/seam_backend.h) that closes every tensor it allocates or is handed (parameters,
// gradients, optimizer moments, activations, images, labels) to the host between backend calls, so any host access
// to them from the trainer, the pipeline executor, evaluation, checkpointing or export is recorded with its call
// stack. With VITPIPE_PROBE_LOOPBACK=1 the backends are the CUDA module's host adapter over the loopback table
// instead (device-flagged tensors: a host access throws). The summary line and the touches go to stderr
// (tests/cuda/check_seam_train.py reads them); the run's files are the plain run's. Built as train_probe_cuda_fakes
// (tests/cuda/tests.cmake, VITPIPE_PROBE_CUDA_FAKES): with VITPIPE_PROBE_CUDA=1 every backend make_cpu_backend() makes
// is instead the CUDA module's own table (module_entry.cpp) with CudaBackend behind the host adapter, on the
// host-memory fakes of the CUDA libraries (tests/cuda/fakes): the trainer's whole step, optimizer included, through the
// module's path but the GPU. The calls per op go to stderr at the end.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "backend/cuda_module_backend.h"
#include "backend/cuda_module_loopback.h"
#include "cli/commands.h"
#ifdef VITPIPE_PROBE_CUDA_FAKES
#include "backend/backend_call.h"
extern "C" const VitpipeCudaModule* vitpipe_cuda_module(void);  // module_entry.cpp, linked into this build
#endif
#include "seam_backend.h"
#include "train/train_options.h"
#include "train/trainer.h"

#ifdef VITPIPE_PROBE_CUDA_FAKES
namespace {

std::atomic<long long> op_calls[VITPIPE_OP_COUNT_PLUS_ONE];
VitpipeCudaModule counting_module;

int counting_call(void* backend, VitpipeBackendCall* call, char* error, size_t error_size) {
  if (call != nullptr && call->op > 0 && call->op < VITPIPE_OP_COUNT_PLUS_ONE) ++op_calls[call->op];
  return vitpipe_cuda_module()->backend_call(backend, call, error, error_size);
}

}  // namespace
#endif

int main(int argc, char** argv) {
  using namespace vitpipe;
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    const bool seam = std::getenv("VITPIPE_PROBE_SEAM") != nullptr;
#ifdef VITPIPE_PROBE_CUDA_FAKES
    const bool on_fakes = std::getenv("VITPIPE_PROBE_CUDA") != nullptr;
    if (on_fakes) {
      counting_module = *vitpipe_cuda_module();
      counting_module.backend_call = counting_call;
      set_backend_wrapper([](std::unique_ptr<Backend>) { return make_cuda_module_backend(counting_module, 0, false); });
    }
#endif
    // VITPIPE_PROBE_LOOPBACK=1: every backend is the CUDA module's host adapter over the loopback table
    // (cuda_module_loopback.h): its tensors are Device::cuda (allocated through the table), so any host access to one
    // above the backend (Tensor::f32() and the like) and any host tensor handed to it as device memory is an error.
    const bool loopback = std::getenv("VITPIPE_PROBE_LOOPBACK") != nullptr;
    if (loopback) {
      set_backend_wrapper(
          [](std::unique_ptr<Backend>) { return make_cuda_module_backend(cuda_module_loopback(), 0, false); });
    }
    if (seam) {
      // Every tensor the backend allocates or is handed (activations, images and labels too) is closed between calls.
      set_backend_wrapper([loopback](std::unique_ptr<Backend> inner) {
        return make_seam_backend(
            loopback ? make_cuda_module_backend(cuda_module_loopback(), 0, false) : std::move(inner), SeamWatch::all);
      });
    }
    if (!args.empty() && (args[0] == "predict" || args[0] == "explain")) {
      CLI::App app{"train_seam_probe"};
      app.require_subcommand(1);
      cli::add_predict_command(app);
      cli::add_explain_command(app);
      try {
        app.parse(argc, argv);
      } catch (const CLI::ParseError& e) {
        return app.exit(e);
      }
    } else {
      run_training(parse_train_options(args));
    }
    if (seam) {
      const SeamReport r = seam_report();
      std::fprintf(stderr,
                   "seam: %lld page ranges closed between calls, %lld of %lld handed bytes; %lld host touches\n",
                   static_cast<long long>(r.regions), static_cast<long long>(r.watched_bytes),
                   static_cast<long long>(r.handed_bytes), static_cast<long long>(r.touches));
      seam_print_touches(stderr);
      seam_release();
    }
#ifdef VITPIPE_PROBE_CUDA_FAKES
    if (on_fakes) {
      std::fprintf(stderr, "cuda fakes calls:");
      for (int op = 1; op < VITPIPE_OP_COUNT_PLUS_ONE; ++op) {
        if (op_calls[op] > 0) std::fprintf(stderr, " %s=%lld", backend_op_name(op).c_str(), op_calls[op].load());
      }
      std::fprintf(stderr, "\n");
    }
#endif
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_seam_probe: %s\n", e.what());
    return 1;
  }
}
