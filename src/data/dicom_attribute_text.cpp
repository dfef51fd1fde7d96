#include "data/dicom_attribute_text.h"

#include <cstdio>

namespace vitpipe {

std::string dicom_attribute_label(const DcmTagKey& key) {
  char text[16];
  std::snprintf(text, sizeof text, "(%04x,%04x)", key.getGroup(), key.getElement());
  return std::string(text) + " " + DcmTag(key).getTagName();
}

std::string trimmed_dicom_value(const OFString& value) {
  std::string s = value.c_str();
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  while (!s.empty() && s.front() == ' ') s.erase(0, 1);
  return s;
}

}  // namespace vitpipe
