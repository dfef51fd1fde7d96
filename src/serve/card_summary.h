// What the try-it page shows of a model's card (README.md, as train/export/`vitpipe card` write it): its title, the
// paragraphs and facts that say what the model is, the intended-use paragraph (with its "not a medical device"
// line) and the mean ROC-AUC per split from the card's model-index. Plain text: Markdown emphasis, code spans and
// links are reduced to their text, so the page can show it without rendering Markdown.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace vitpipe {

// {"title", "summary": [paragraph], "facts": [bullet], "intended_use", "mean_roc_auc": [{"split", "value",
// "name"}]} from the card's text; null when `text` has no title (not a card).
nlohmann::json card_summary(const std::string& text);

// card_summary of MODEL_DIR/README.md; null when there is none. A card whose front matter is not YAML is read
// without its model-index (the page still shows the rest).
nlohmann::json card_summary_of(const std::filesystem::path& model_dir);

// `text` with Markdown's **, __, ` and [text](url) reduced to their text.
std::string markdown_plain_text(const std::string& text);

}  // namespace vitpipe
