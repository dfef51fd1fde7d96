#include "serve/card_summary.h"

#include <yaml-cpp/yaml.h>

#include <sstream>
#include <vector>

#include "util/atomic_file.h"

namespace vitpipe {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r") - begin + 1);
}

// The front matter's model-index: each result's metric with config "mean" (the card writes one per split).
nlohmann::json mean_results(const std::string& front_matter) {
  nlohmann::json out = nlohmann::json::array();
  YAML::Node meta;
  try {
    meta = YAML::Load(front_matter);
  } catch (const YAML::Exception&) {
    return out;
  }
  if (!meta.IsMap() || !meta["model-index"] || !meta["model-index"].IsSequence()) return out;
  try {
    for (const auto& model : meta["model-index"]) {
      if (!model.IsMap() || !model["results"] || !model["results"].IsSequence()) continue;
      for (const auto& result : model["results"]) {
        if (!result.IsMap() || !result["metrics"] || !result["metrics"].IsSequence()) continue;
        const std::string split = result["dataset"] && result["dataset"].IsMap() && result["dataset"]["split"]
                                      ? result["dataset"]["split"].as<std::string>()
                                      : "";
        for (const auto& metric : result["metrics"]) {
          if (!metric.IsMap() || !metric["config"] || metric["config"].as<std::string>() != "mean" || !metric["value"])
            continue;
          out.push_back({{"split", split},
                         {"value", metric["value"].as<double>()},
                         {"name", metric["name"] ? metric["name"].as<std::string>() : "mean"}});
        }
      }
    }
  } catch (const YAML::Exception&) {  // a field of another type: that part of the index is not shown
  }
  return out;
}

}  // namespace

std::string markdown_plain_text(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 2, "**") == 0 || text.compare(i, 2, "__") == 0) {
      i += 2;
    } else if (text[i] == '`') {
      ++i;
    } else if (text[i] == '[') {
      // [text](url): the text. A '[' that does not open a link is kept.
      const size_t close = text.find("](", i);
      const size_t end = close == std::string::npos ? std::string::npos : text.find(')', close);
      if (close == std::string::npos || end == std::string::npos || text.find('\n', i) < end) {
        out += text[i++];
      } else {
        out += markdown_plain_text(text.substr(i + 1, close - i - 1));
        i = end + 1;
      }
    } else {
      out += text[i++];
    }
  }
  return out;
}

nlohmann::json card_summary(const std::string& text) {
  std::string body = text, front_matter;
  if (starts_with(body, "---")) {
    const size_t end = body.find("\n---", 3);
    if (end != std::string::npos) {
      front_matter = body.substr(3, end - 3);
      const size_t after = body.find('\n', end + 4);
      body = after == std::string::npos ? "" : body.substr(after + 1);
    }
  }
  std::vector<std::string> lines;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) lines.push_back(line);

  nlohmann::json out = {{"title", nullptr},
                        {"summary", nlohmann::json::array()},
                        {"facts", nlohmann::json::array()},
                        {"intended_use", nullptr},
                        {"mean_roc_auc", mean_results(front_matter)}};
  size_t i = 0;
  while (i < lines.size() && !starts_with(lines[i], "# ")) ++i;
  if (i == lines.size()) return nullptr;
  out["title"] = markdown_plain_text(trim(lines[i].substr(2)));
  // Up to the first section: paragraphs and the bullet list of facts.
  std::string paragraph;
  auto flush = [&](nlohmann::json& into) {
    if (!trim(paragraph).empty()) into.push_back(markdown_plain_text(trim(paragraph)));
    paragraph.clear();
  };
  for (++i; i < lines.size() && !starts_with(lines[i], "## "); ++i) {
    const std::string line = trim(lines[i]);
    if (starts_with(line, "<!--")) continue;
    if (starts_with(line, "- ")) {
      flush(out["summary"]);
      out["facts"].push_back(markdown_plain_text(trim(line.substr(2))));
    } else if (line.empty()) {
      flush(out["summary"]);
    } else {
      paragraph += (paragraph.empty() ? "" : " ") + line;
    }
  }
  flush(out["summary"]);
  // The intended-use section's first paragraph.
  while (i < lines.size() && trim(lines[i]) != "## Intended use") ++i;
  for (++i; i < lines.size() && !starts_with(lines[i], "#"); ++i) {
    const std::string line = trim(lines[i]);
    if (line.empty() && !paragraph.empty()) break;
    if (!line.empty()) paragraph += (paragraph.empty() ? "" : " ") + line;
  }
  if (!paragraph.empty()) out["intended_use"] = markdown_plain_text(paragraph);
  return out;
}

nlohmann::json card_summary_of(const std::filesystem::path& model_dir) {
  const std::filesystem::path readme = model_dir / "README.md";
  if (!std::filesystem::is_regular_file(readme)) return nullptr;
  return card_summary(read_text_file(readme));
}

}  // namespace vitpipe
