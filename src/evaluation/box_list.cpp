#include "evaluation/box_list.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include "data/csv_table.h"
#include "util/error.h"

namespace vitpipe {
namespace {

constexpr double kNihFrame = 1024;  // NIH's boxes are in the frame of the released 1024 x 1024 PNGs

std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, ',')) fields.push_back(field);
  if (!line.empty() && line.back() == ',') fields.push_back("");
  return fields;
}

}  // namespace

std::vector<FindingBox> read_box_list(const std::filesystem::path& path) {
  VP_REQUIRE(std::filesystem::is_regular_file(path), "--boxes ", path.string(), ": no such file");
  std::istringstream in(read_file_maybe_gzip(path));
  std::string line;
  int64_t number = 0;
  bool nih = false, header = true;
  std::vector<FindingBox> boxes;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::vector<std::string> f = split_fields(line);
    if (header) {
      header = false;
      nih = f.size() >= 3 && f[0] == "Image Index" && f[1] == "Finding Label" && f[2].rfind("Bbox", 0) == 0;
      const bool generic = f.size() == 6 && f[0] == "image" && f[1] == "finding" && f[2] == "x" && f[3] == "y" &&
                           f[4] == "w" && f[5] == "h";
      VP_REQUIRE(
          nih || generic, path.string(),
          " line 1: expected NIH's header \"Image Index,Finding Label,Bbox [x,y,w,h]\" or image,finding,x,y,w,h");
      continue;
    }
    while (f.size() > 6 && f.back().empty()) f.pop_back();
    VP_REQUIRE(f.size() == 6, path.string(), " line ", number, ": expected 6 fields (image, finding, x, y, w, h), got ",
               f.size());
    FindingBox box;
    box.image = f[0];
    box.finding = f[1] == "Infiltrate" ? "Infiltration" : f[1];
    box.frame = nih ? kNihFrame : 0;
    box.line = number;
    double* values[4] = {&box.x, &box.y, &box.w, &box.h};
    for (int k = 0; k < 4; ++k) {
      const std::string& text = f[static_cast<size_t>(2 + k)];
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *values[k]);
      VP_REQUIRE(error == std::errc() && end == text.data() + text.size() && std::isfinite(*values[k]), path.string(),
                 " line ", number, ": ", "xywh"[k], " \"", text, "\" is not a number");
    }
    VP_REQUIRE(box.w > 0 && box.h > 0 && box.x >= 0 && box.y >= 0, path.string(), " line ", number,
               ": expected a box with x, y >= 0 and w, h > 0");
    VP_REQUIRE(!box.image.empty() && !box.finding.empty(), path.string(), " line ", number, ": empty image or finding");
    boxes.push_back(std::move(box));
  }
  VP_REQUIRE(!header, path.string(), ": empty file");
  return boxes;
}

FindingBox box_in_image(const FindingBox& box, int64_t width, int64_t height) {
  if (box.frame <= 0) return box;
  FindingBox scaled = box;
  const double sx = static_cast<double>(width) / box.frame, sy = static_cast<double>(height) / box.frame;
  scaled.x *= sx, scaled.w *= sx, scaled.y *= sy, scaled.h *= sy;
  scaled.frame = 0;
  return scaled;
}

}  // namespace vitpipe
