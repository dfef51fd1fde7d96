// DCMTK reads a sequence inside an item inside a sequence by recursion, about 1.5 KB of stack a level: a 700 KB file
// nesting 20,000 sequences overflowed an 8 MB stack and killed the process (serve with it). The encoding is walked
// here first, without recursion, and a file nesting deeper than any real one is refused before DCMTK reads it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace vitpipe {

// Sequences inside sequences at most (structured reports nest a few levels; 64 is far past any real file).
inline constexpr int kMaxDicomSequenceNesting = 64;

struct DicomEncoding {
  bool explicit_vr = true;
  bool little_endian = true;
};

// Walks data[start, size) as a data set in `encoding` and throws, naming `name`, when sequences nest deeper than
// kMaxDicomSequenceNesting. Stops quietly where it cannot follow the encoding (a length past the end: DCMTK then
// says what is wrong) and, with `meta_only`, at the first top-level element outside group 0002 (the file meta
// information).
void check_dicom_nesting(const uint8_t* data, size_t size, size_t start, DicomEncoding encoding,
                         const std::string& name, bool meta_only = false);

}  // namespace vitpipe
