// The model card: README.md in a model directory, as the Hugging Face Hub reads it (YAML front matter with
// `model-index`, then Markdown). It is rendered only from the run's own files (train_options.json, metrics.jsonl,
// predictions-SPLIT.csv, thresholds.json) and the model directory (config.json, preprocessor_config.json, the
// weights' header), so `vitpipe card` reproduces it and it never states a number the run did not measure: what was
// not evaluated says "not evaluated". The metrics come from the evaluation layer (src/evaluation/), not the report.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace vitpipe {

struct ModelCardOptions {
  // The training output directory the model came from ("" = none known: no data, protocol or results).
  std::filesystem::path run_dir;
  // The training step of the weights in the directory when it is an export of one checkpoint (-1: not known): results
  // are shown only when the run evaluated those very weights (thresholds.json's step). nullopt: the run's own model/.
  std::optional<int64_t> step;
  std::string license;      // "" = not known (then read from the base model's cached card, else omitted)
  std::string base_model;   // overrides train_options.json's model (a Hub repo id, when it was one)
  bool adapter = false;     // a peft adapter directory: library_name peft, the base model is required to use it
  bool force = false;       // replace a README.md vitpipe did not write
  int64_t bootstrap = 200;  // resamples for the 95% intervals (the HTML report's default, so both agree)
};

// The card's text. Throws vitpipe::Error naming the file and field of a malformed input.
std::string model_card_markdown(const std::filesystem::path& model_dir, const ModelCardOptions& options);

// Writes MODEL_DIR/README.md atomically. An existing README.md without vitpipe's marker is refused (one line naming
// it and --force) unless options.force. Returns the path written.
std::filesystem::path write_model_card(const std::filesystem::path& model_dir, const ModelCardOptions& options);

// True when `text` is a card vitpipe generated (it carries the marker comment).
bool is_vitpipe_model_card(const std::string& text);

// The options a card was generated with, from its marker (run directory, step, license, base model, adapter), so
// `vitpipe card DIR` regenerates an exported card without being told again; nullopt for other text.
std::optional<ModelCardOptions> model_card_source(const std::string& text);

}  // namespace vitpipe
