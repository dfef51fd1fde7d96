#include "serve/dicom_identifiers.h"

namespace vitpipe {

bool is_valid_dicom_uid(std::string_view uid) {
  if (uid.empty() || uid.size() > 64) return false;
  bool component_empty = true;
  for (char c : uid) {
    if (c == '.') {
      if (component_empty) return false;
      component_empty = true;
    } else if (c >= '0' && c <= '9') {
      component_empty = false;
    } else {
      return false;
    }
  }
  return !component_empty;
}

bool is_valid_ae_title(std::string_view ae_title) {
  if (ae_title.empty() || ae_title.size() > 16) return false;
  if (ae_title.find_first_not_of(' ') == std::string_view::npos) return false;
  for (char c : ae_title) {
    if (c == '\\' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace vitpipe
