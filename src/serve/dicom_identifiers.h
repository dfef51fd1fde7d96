// Checks on the identifiers the DICOM node and sender take from the network or the command line.
#pragma once

#include <string_view>

namespace vitpipe {

// A DICOM UID (PS3.5 9.1): 1..64 characters, dot-separated components of digits. Such a UID is also a safe file
// name, which is why the spool names files by it.
bool is_valid_dicom_uid(std::string_view uid);

// An AE title (PS3.5 6.2): 1..16 characters, no backslash or control characters, not only spaces.
bool is_valid_ae_title(std::string_view ae_title);

}  // namespace vitpipe
