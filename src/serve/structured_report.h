// The findings of one image as a DICOM Comprehensive SR (PS3.3 A.35.3), filed as a new series in the image's study:
//
//   CONTAINER (18748-4, LN, "Diagnostic Imaging Report"), completion COMPLETE, verification UNVERIFIED
//     CONTAINS TEXT  (121106, DCM, "Comment"): the statement that this is not a diagnosis
//     CONTAINS TEXT  (111001, DCM, "Algorithm Name")
//     CONTAINS TEXT  (111003, DCM, "Algorithm Version")
//     CONTAINS IMAGE (121112, DCM, "Source of Measurement"): the image (also in the Current Requested Procedure
//                    Evidence Sequence, which DCMTK does not fill by itself)
//     CONTAINS CONTAINER (121070, DCM, "Findings")
//       CONTAINS NUM (finding_code_value(label), 99VITPIPE, label): the probability, unit (1, UCUM, "no units"),
//                    as a decimal string (dicom_decimal_string.h) and as its exact float64
//
// Labels are code meanings (LO): longer than 64 bytes of UTF-8, they are cut to 64 at a character boundary
// (serve/dicom_text.h); their code values, made from the whole label, still tell them apart. Written with DCMTK's dcmsr
// (DSRDocument).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "serve/dicom_uid.h"

namespace vitpipe {

struct LabelProbability {
  std::string label;  // UTF-8
  double probability = 0;
};

struct StructuredReportContent {
  std::vector<LabelProbability> findings;  // one NUM item each, in this order
  std::string algorithm_name;              // e.g. the model's name or directory name
  std::string algorithm_version;           // e.g. "vitpipe 0.1.0"
  std::string sop_instance_uid;            // given by the caller (kept in the spool so a retry resends the same SR)
  std::string series_instance_uid;         // given by the caller; the SR is a new series in the image's study
};

// Coding scheme designator of the labels' codes (a private one: "99" prefix, PS3.16 8.2).
inline constexpr const char* kFindingCodingScheme = "99VITPIPE";

// The code value of a label: "VP" and the first 14 hex digits of the SHA-256 of its UTF-8 bytes (16 characters, the
// SH limit). The same label always has the same code, whatever the model or its label order, so a PACS query by code
// finds it across reports.
std::string finding_code_value(std::string_view label);

// Builds the SR from the image file it reports on and writes it atomically (DICOM file, explicit VR little endian).
// Throws vitpipe::Error naming the file and the attribute on anything DCMTK refuses, on a probability that is not a
// number in [0, 1], an empty or repeated label, or text that cannot be a DICOM string value.
void write_structured_report(const std::filesystem::path& image_file, const StructuredReportContent& content,
                             const std::filesystem::path& out_file);

}  // namespace vitpipe
