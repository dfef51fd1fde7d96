// Each subcommand of `vitpipe` lives in its own file and registers itself here.
#pragma once

#include <CLI/CLI.hpp>

namespace vitpipe::cli {

// Adds the subcommand and its callback to `app`. Callbacks throw vitpipe::Error on bad input.
void add_info_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_predict_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_init_command(CLI::App& app);
void add_download_command(CLI::App& app);
void add_push_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_image_command(CLI::App& app);
void add_explain_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_card_command(CLI::App& app);

}  // namespace vitpipe::cli
