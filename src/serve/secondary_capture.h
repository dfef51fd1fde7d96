// A heatmap overlay as a DICOM Secondary Capture Image (PS3.3 A.8.1, SOP class 1.2.840.10008.5.1.4.1.1.7): 8-bit
// RGB, filed as a new series in the study of the image it was computed from, which it references in its Source Image
// Sequence. ConversionType WSD (workstation), BurnedInAnnotation YES: the caption is part of the pixels. The image's
// BodyPartExamined and laterality are copied; Laterality is written empty (unknown) when the image names no body part.
#pragma once

#include <filesystem>
#include <string>

#include "data/image.h"

namespace vitpipe {

// `overlay` must be RGB (channels 3). `description` (UTF-8) becomes the SeriesDescription (cut to 64 bytes at a
// character boundary) and the DerivationDescription (cut to 1024); a backslash or control character in it is refused.
// Written atomically, explicit VR little endian. Throws vitpipe::Error naming the file and the attribute on anything
// DCMTK refuses, or on an image that is not DICOM or lacks a UID.
void write_heatmap_secondary_capture(const std::filesystem::path& image_file, const DecodedImage& overlay,
                                     const std::string& description, const std::string& sop_instance_uid,
                                     const std::string& series_instance_uid, const std::filesystem::path& out_file);

}  // namespace vitpipe
