#include "data/dicom_nesting.h"

// clang-format off
#include <dcmtk/config/osconfig.h>  // must come first
// clang-format on
#include <dcmtk/dcmdata/dctag.h>

#include <vector>

#include "util/error.h"

namespace vitpipe {
namespace {

constexpr uint32_t kUndefinedLength = 0xFFFFFFFF;
constexpr uint64_t kOpenEnd = UINT64_MAX;  // a container of undefined length: it ends at its delimiter

struct Level {
  uint64_t end = kOpenEnd;
  bool sequence = false;   // a sequence (its children are items), else an item (its children are elements)
  bool fragments = false;  // encapsulated pixel data: its items are compressed bytes, not data sets
  DicomEncoding encoding;  // what the children are encoded in
};

uint16_t read_u16(const uint8_t* p, bool little_endian) {
  return little_endian ? static_cast<uint16_t>(p[0] | p[1] << 8) : static_cast<uint16_t>(p[0] << 8 | p[1]);
}

uint32_t read_u32(const uint8_t* p, bool little_endian) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= uint32_t{p[little_endian ? i : 3 - i]} << (8 * i);
  return value;
}

// Explicit VRs whose length field is 4 bytes after 2 reserved ones (PS3.5 7.1.2).
bool has_long_length(char a, char b) {
  static constexpr const char* kLong[] = {"OB", "OD", "OF", "OL", "OV", "OW", "SQ", "SV", "UC", "UN", "UR", "UT", "UV"};
  for (const char* vr : kLong)
    if (vr[0] == a && vr[1] == b) return true;
  return false;
}

std::string hex_tag(uint16_t value) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out(4, '0');
  for (int i = 3; i >= 0; --i, value >>= 4) out[i] = kDigits[value & 15];
  return out;
}

bool dictionary_says_sequence(uint16_t group, uint16_t element) { return DcmTag(group, element).getEVR() == EVR_SQ; }

}  // namespace

void check_dicom_nesting(const uint8_t* data, size_t size, size_t start, DicomEncoding encoding,
                         const std::string& name, bool meta_only) {
  std::vector<Level> open;
  int sequences = 0;
  const auto pop = [&] {
    if (open.back().sequence && !open.back().fragments) --sequences;
    open.pop_back();
  };
  uint64_t p = start;
  while (p + 8 <= size) {
    while (!open.empty() && open.back().end != kOpenEnd && p >= open.back().end) pop();
    const DicomEncoding here = open.empty() ? encoding : open.back().encoding;
    const uint16_t group = read_u16(data + p, here.little_endian);
    const uint16_t element = read_u16(data + p + 2, here.little_endian);
    if (group == 0xFFFE) {  // items and delimiters: no VR in any encoding
      const uint32_t length = read_u32(data + p + 4, here.little_endian);
      p += 8;
      if (element == 0xE000) {
        if (!open.empty() && open.back().fragments) {
          if (length == kUndefinedLength) return;
          p += length;
        } else {
          open.push_back({length == kUndefinedLength ? kOpenEnd : p + length, false, false, here});
        }
      } else if (element == 0xE00D) {
        if (!open.empty() && !open.back().sequence) pop();
      } else if (element == 0xE0DD) {
        if (!open.empty() && !open.back().sequence) pop();
        if (!open.empty() && open.back().sequence) pop();
      } else if (length != kUndefinedLength) {
        p += length;
      }
      continue;
    }
    if (meta_only && open.empty() && group != 0x0002) return;
    uint32_t length = 0;
    bool sequence = false;
    DicomEncoding inside = here;
    if (here.explicit_vr) {
      const char a = static_cast<char>(data[p + 4]), b = static_cast<char>(data[p + 5]);
      if (has_long_length(a, b)) {
        if (p + 12 > size) return;
        length = read_u32(data + p + 8, here.little_endian);
        p += 12;
      } else {
        length = read_u16(data + p + 6, here.little_endian);
        p += 8;
      }
      const bool unknown = a == 'U' && b == 'N';
      sequence =
          (a == 'S' && b == 'Q') || length == kUndefinedLength || (unknown && dictionary_says_sequence(group, element));
      if (unknown) inside = {false, true};  // DCMTK reads a UN sequence as implicit VR little endian
    } else {
      length = read_u32(data + p + 4, here.little_endian);
      p += 8;
      sequence = length == kUndefinedLength || dictionary_says_sequence(group, element);
    }
    if (!sequence) {
      p += length;
      continue;
    }
    const bool fragments = group == 0x7FE0 && element == 0x0010;  // encapsulated (compressed) pixel data
    open.push_back({length == kUndefinedLength ? kOpenEnd : p + length, true, fragments, inside});
    if (!fragments) ++sequences;
    VP_REQUIRE(sequences <= kMaxDicomSequenceNesting, name, ": sequences nest more than ", kMaxDicomSequenceNesting,
               " deep (at byte ", p, ", element (", hex_tag(group), ",", hex_tag(element),
               ")); refused before parsing: a real DICOM file nests a few levels");
  }
}

}  // namespace vitpipe
