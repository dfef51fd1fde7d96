#include "data/label_codes.h"

#include <cctype>
#include <string>

namespace vitpipe {

LabelCode parse_label_code(std::string_view cell) {
  while (!cell.empty() && cell.front() == ' ') cell.remove_prefix(1);
  while (!cell.empty() && cell.back() == ' ') cell.remove_suffix(1);
  if (cell.empty()) return LabelCode::blank;
  if (cell == "1" || cell == "1.0") return LabelCode::positive;
  if (cell == "0" || cell == "0.0" || cell == "-0.0") return LabelCode::negative;
  if (cell == "-1" || cell == "-1.0") return LabelCode::uncertain;
  std::string lower(cell);
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "nan") return LabelCode::blank;
  return LabelCode::invalid;
}

void add_label_code(LabelCode code, int32_t label, DatasetItem& item) {
  switch (code) {
    case LabelCode::positive:
      item.labels.push_back(label);
      break;
    case LabelCode::uncertain:
      item.uncertain.push_back(label);
      break;
    case LabelCode::blank:
      item.unmentioned.push_back(label);
      break;
    case LabelCode::negative:
    case LabelCode::invalid:
      break;
  }
}

}  // namespace vitpipe
