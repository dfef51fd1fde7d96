// vitpipe: fine-tune Hugging Face Vision Transformers on medical images, on CPUs (and later GPUs), with pipeline
// and data parallelism.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/help_formatter.h"
#include "cli/suggestions.h"
#include "util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"vitpipe: fine-tune Hugging Face Vision Transformers on medical images"};
  app.formatter(std::make_shared<vitpipe::cli::HelpFormatter>());  // before the subcommands, which inherit it
  app.require_subcommand(1);
  app.set_version_flag("--version", "vitpipe 0.1.0");
  vitpipe::cli::add_info_command(app);
  vitpipe::cli::add_bench_command(app);
  vitpipe::cli::add_train_command(app);
  vitpipe::cli::add_plan_command(app);
  vitpipe::cli::add_eval_command(app);
  vitpipe::cli::add_export_command(app);
  vitpipe::cli::add_predict_command(app);
  vitpipe::cli::add_data_command(app);
  vitpipe::cli::add_init_command(app);
  vitpipe::cli::add_download_command(app);
  vitpipe::cli::add_push_command(app);
  vitpipe::cli::add_report_command(app);
  vitpipe::cli::add_explain_command(app);
  vitpipe::cli::add_image_command(app);
  vitpipe::cli::add_serve_command(app);
  vitpipe::cli::add_card_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // An unknown subcommand or flag near a known one: name the one meant.
    const bool unknown = dynamic_cast<const CLI::ExtrasError*>(&e) || dynamic_cast<const CLI::RequiredError*>(&e);
    if (const auto hint = unknown ? vitpipe::cli::suggest_correction(app, argc, argv) : std::nullopt) {
      std::fprintf(stderr, "error: %s\n", hint->c_str());
      return e.get_exit_code();
    }
    return app.exit(e);
  } catch (const vitpipe::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  // What the command printed must have reached its destination: on a full disk `predict > rows.jsonl` exited 0 with
  // the rows cut at 8 KiB. A write that failed mid-run leaves the stream's error flag set; the last flush tells why.
  std::cout.flush();
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0;
  if (flush_failed || std::ferror(stdout) || std::cout.fail()) {
    std::fprintf(stderr, "error: standard output: the command's output could not all be written (%s)\n",
                 errno != 0 ? std::strerror(errno) : "a write failed; disk full?");
    return 1;
  }
  return 0;
}
