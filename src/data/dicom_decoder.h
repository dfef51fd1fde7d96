// DICOM files (PS3.10: 128-byte preamble, "DICM", file meta information, data set) read with DCMTK, their pixels
// turned into the 8-bit image the processor sees by the rule of data/dicom_pixels.h.
//
// Transfer syntaxes: implicit / explicit VR little endian, explicit VR big endian, deflate, JPEG (baseline,
// extended 12-bit, lossless process 14 and SV1), JPEG-LS (lossless and near-lossless) and RLE through DCMTK's codecs;
// JPEG 2000 (lossless and lossy) through OpenJPEG (data/dicom_jpeg2000.h). Any other is refused with its UID and
// name. DCMTK checks every element's length against the bytes left, so a truncated file or a lying length field is
// refused naming the element, and the pixel count is checked against max_image_pixels() before any pixel buffer is
// allocated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/image.h"
#include "data/image_read_options.h"

namespace vitpipe {

// "DICM" at byte 128: how DICOM files are recognised, whatever their extension (.dcm, .dicom, none).
bool has_dicom_preamble(const uint8_t* data, size_t size);

// What the file meta information says the file holds: Media Storage SOP Class and Instance UIDs (0002,0002) and
// (0002,0003), and the transfer syntax. Throws vitpipe::Error naming `name_for_errors` when it cannot be read or
// lacks them.
struct DicomFileIdentity {
  std::string sop_class_uid, sop_instance_uid, transfer_syntax_uid;
};
DicomFileIdentity read_dicom_file_identity(const uint8_t* data, size_t size, const std::string& name_for_errors);

// Throws vitpipe::Error naming `name_for_errors` when the file's sequences nest deeper than DCMTK's recursive reader
// can take (data/dicom_nesting.h): for files DCMTK reads itself (loadFile), checked first. A file whose meta
// information or transfer syntax cannot be read passes: the reader that follows says why.
void check_dicom_file_nesting(const uint8_t* data, size_t size, const std::string& name_for_errors);

// Gray images come back with channels == 1, RGB with 3. Multi-frame images are refused unless
// options.dicom_first_frame. Throws vitpipe::Error naming `name_for_errors` and the offending element.
DecodedImage decode_dicom(const uint8_t* data, size_t size, const std::string& name_for_errors,
                          const ImageReadOptions& options);

}  // namespace vitpipe
