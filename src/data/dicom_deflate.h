// The data set of a Deflated Explicit VR Little Endian DICOM file (PS3.5 A.5: raw deflate, no zlib header),
// inflated before DCMTK parses it, so that every length field of it is checked against the inflated size (see
// data/dicom_memory_stream.h) and a deflate bomb stops at a limit instead of filling memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vitpipe {

// Inflates `data` (what follows the file meta information). The limit is 8 bytes per pixel of
// VITPIPE_MAX_IMAGE_PIXELS plus 64 MiB for everything around the pixels; past it, or on a corrupt stream, throws
// vitpipe::Error naming `name`.
std::vector<uint8_t> inflate_dicom_data_set(const uint8_t* data, size_t size, const std::string& name);

}  // namespace vitpipe
