// The report's localization section: how well the model's heatmaps point at radiologists' boxes, as `eval --boxes
// --save-localization FILE.json` measured them (explain/localize_boxes.h): per finding the boxes scored, the pointing
// game and T(IoBB) at Wang et al.'s thresholds 0.1 .. 0.7 with their intervals over boxes where the evaluation drew
// them, and the worst-localized images with the box drawn over the map. Without such a file the section says the
// heatmaps were not evaluated on boxes, and how to do it.
#pragma once

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace vitpipe {

inline constexpr const char* kLocalizationFormat = "vitpipe-localization";
// Worst-localized images `eval --save-localization` draws for the report.
inline constexpr size_t kReportLocalizationImages = 6;

struct LocalizationFile {
  std::filesystem::path path;
  nlohmann::json data;  // as eval wrote it: {"format", "version", "split", "boxes", "per_finding", "worst_images"...}
};

// Refuses, in one line naming the file and the field, anything but a file `eval --save-localization` wrote.
LocalizationFile read_localization_file(const std::filesystem::path& path);

// The <section>; "not evaluated" (with the command that evaluates) when `file` is empty.
std::string localization_section(const std::optional<LocalizationFile>& file);

// The file's numbers for the report's embedded JSON: as written, less the images (already in the page).
nlohmann::json localization_summary_json(const LocalizationFile& file);

}  // namespace vitpipe
