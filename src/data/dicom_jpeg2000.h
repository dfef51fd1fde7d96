// JPEG 2000 frames of DICOM files (transfer syntaxes 1.2.840.10008.1.2.4.90 and .91), decoded with OpenJPEG: the
// one syntax DCMTK as packaged in Debian does not decode (its JPEG 2000 codec is not open source).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/dicom_pixels.h"

namespace vitpipe {

// A J2K codestream (or a JP2 file) holding one frame -> the frame's bytes as an uncompressed DICOM frame of `module`
// would hold them: little-endian words of Bits Allocated, samples interleaved. Before decoding, the codestream's
// size and components must match the DICOM header (so a lying codestream cannot allocate more than the header
// allows). Throws naming `name`.
std::vector<uint8_t> decode_jpeg2000_frame(const uint8_t* data, size_t size, const DicomPixelModule& module,
                                           const std::string& name);

}  // namespace vitpipe
