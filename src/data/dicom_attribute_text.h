// How vitpipe names a DICOM attribute in messages, and reads a string value: shared by the decoder and the writers
// of serve's SR and Secondary Capture.
#pragma once

// clang-format off
#include <dcmtk/config/osconfig.h>  // must come first
// clang-format on
#include <dcmtk/dcmdata/dctag.h>
#include <dcmtk/dcmdata/dctagkey.h>
#include <dcmtk/ofstd/ofstring.h>

#include <string>

namespace vitpipe {

// "(0028,0010) Rows"
std::string dicom_attribute_label(const DcmTagKey& key);

// A string value without its padding (trailing spaces or NUL, leading spaces).
std::string trimmed_dicom_value(const OFString& value);

}  // namespace vitpipe
