// `vitpipe info`: what this build can use (threads, oneDNN ISA), for bug reports and benchmarks.
#include <cstdio>
#include <oneapi/dnnl/dnnl.hpp>

#include "cli/commands.h"
#include "util/threads.h"

namespace vitpipe::cli {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Print this build's versions and the CPU features it uses");
  cmd->callback([] {
    const dnnl_version_t* v = dnnl_version();
    std::printf("vitpipe 0.1.0\noneDNN %d.%d.%d (%s)\ncores available: %d\n", v->major, v->minor, v->patch, v->hash,
                available_cores());
  });
}

}  // namespace vitpipe::cli
