// Writing a DICOM file (PS3.10: preamble, file meta information, data set) the way vitpipe writes every file: whole
// or not at all (util/atomic_file.h), so a spool never holds half an object that a sender would transmit.
#pragma once

#include <filesystem>

class DcmFileFormat;

namespace vitpipe {

// Explicit VR little endian; the file meta information is made from the data set's SOP class and instance UIDs.
// Throws vitpipe::Error naming `out_file` when DCMTK cannot encode the data set or the file cannot be written.
void write_dicom_file_atomically(DcmFileFormat& file, const std::filesystem::path& out_file);

}  // namespace vitpipe
