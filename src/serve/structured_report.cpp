#include "serve/structured_report.h"

// clang-format off
#include <dcmtk/config/osconfig.h>  // must come first
// clang-format on
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmsr/dsrcodvl.h>
#include <dcmtk/dcmsr/dsrdoc.h>
#include <dcmtk/dcmsr/dsrimgvl.h>
#include <dcmtk/dcmsr/dsrnumvl.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "data/source_fingerprint.h"
#include "serve/dicom_decimal_string.h"
#include "serve/dicom_file_output.h"
#include "serve/dicom_source_image.h"
#include "serve/dicom_text.h"
#include "util/error.h"

namespace vitpipe {
namespace {

constexpr size_t kMaxCodeMeaningBytes = 64;  // LO
constexpr const char* kNotADiagnosis =
    "Produced by a machine-learning model; not a diagnosis. Requires review by a qualified reader.";
constexpr const char* kSeriesNumber = "9001";  // after the acquisition's series in a viewer's list

// Fails with the file, what was being set and DCMTK's reason.
void check(const OFCondition& status, const std::filesystem::path& out_file, const std::string& what) {
  VP_REQUIRE(status.good(), out_file.string(), ": DCMTK refused ", what, " (", status.text(), ")");
}

DSRCodedEntryValue code(const std::string& value, const std::string& scheme, const std::string& meaning,
                        const std::filesystem::path& out_file) {
  DSRCodedEntryValue entry;
  check(entry.setCode(value.c_str(), scheme.c_str(), meaning.c_str()), out_file,
        concat("the code (", value, ", ", scheme, ", \"", meaning, "\")"));
  return entry;
}

class ReportTree {
 public:
  ReportTree(DSRDocumentTree& tree, const std::filesystem::path& out_file) : tree_(tree), out_file_(out_file) {}

  // The first child goes below the current item, the next ones after it.
  void add(DSRTypes::E_ValueType type, const DSRCodedEntryValue& concept_name, const std::string& what) {
    const OFCondition status = first_child_ ? tree_.addChildContentItem(DSRTypes::RT_contains, type, concept_name)
                                            : tree_.addContentItem(DSRTypes::RT_contains, type, concept_name);
    check(status, out_file_, concat("the content item ", what));
    first_child_ = false;
  }
  void add_text(const DSRCodedEntryValue& concept_name, const std::string& text, const std::string& what) {
    add(DSRTypes::VT_Text, concept_name, what);
    check(tree_.getCurrentContentItem().setStringValue(text.c_str()), out_file_, concat(what, " \"", text, "\""));
  }
  // Items added next go below the current one.
  void descend() { first_child_ = true; }
  DSRContentItem& current() { return tree_.getCurrentContentItem(); }

 private:
  DSRDocumentTree& tree_;
  const std::filesystem::path& out_file_;
  bool first_child_ = true;
};

void require_probability(const LabelProbability& finding, const std::string& out) {
  VP_REQUIRE(std::isfinite(finding.probability) && finding.probability >= 0 && finding.probability <= 1, out,
             ": the probability of \"", finding.label, "\" is ", finding.probability, " (expected a number in [0, 1])");
}

DSRNumericMeasurementValue probability_value(double probability, const DSRCodedEntryValue& unit,
                                             const std::filesystem::path& out_file, const std::string& what) {
  DSRNumericMeasurementValue value;
  const std::string text = format_decimal_string(probability);
  check(value.setValue(text.c_str(), unit), out_file, concat(what, " numeric value \"", text, "\""));
  check(value.setFloatingPointRepresentation(probability), out_file, concat(what, " floating point value"));
  return value;
}

}  // namespace

std::string finding_code_value(std::string_view label) {
  std::string hex = sha256_hex(label.data(), label.size()).substr(0, 14);
  std::transform(hex.begin(), hex.end(), hex.begin(), [](unsigned char c) { return std::toupper(c); });
  return "VP" + hex;
}

void write_structured_report(const std::filesystem::path& image_file, const StructuredReportContent& content,
                             const std::filesystem::path& out_file) {
  const std::string out = out_file.string();
  require_valid_dicom_uid(content.sop_instance_uid, out + ": the SR's SOP Instance UID");
  require_valid_dicom_uid(content.series_instance_uid, out + ": the SR's Series Instance UID");
  VP_REQUIRE(!content.findings.empty(), out, ": no findings to report");
  VP_REQUIRE(is_valid_utf8(content.algorithm_name) && !content.algorithm_name.empty(), out,
             ": the algorithm name is empty or not valid UTF-8");
  VP_REQUIRE(is_valid_utf8(content.algorithm_version) && !content.algorithm_version.empty(), out,
             ": the algorithm version is empty or not valid UTF-8");
  bool non_ascii = !is_ascii(content.algorithm_name) || !is_ascii(content.algorithm_version);
  std::set<std::string> labels, codes;
  for (const LabelProbability& finding : content.findings) {
    VP_REQUIRE(!finding.label.empty(), out, ": a finding has an empty label");
    require_single_line_dicom_text(finding.label, out + ": the label");
    require_probability(finding, out);
    VP_REQUIRE(labels.insert(finding.label).second, out, ": the label \"", finding.label, "\" appears twice");
    // Two labels sharing 56 bits of SHA-256: never seen, but a report must not give two findings one code.
    VP_REQUIRE(codes.insert(finding_code_value(finding.label)).second, out, ": the label \"", finding.label,
               "\" has the code value of another label");
    non_ascii = non_ascii || !is_ascii(finding.label);
  }

  const DicomSourceImage source = read_dicom_source_image(image_file);
  VP_REQUIRE(content.series_instance_uid != source.series_instance_uid, out_file.string(),
             ": the SR's Series Instance UID is the image's; the SR must be a new series");
  VP_REQUIRE(content.sop_instance_uid != source.sop_instance_uid, out_file.string(),
             ": the SR's SOP Instance UID is the image's");
  non_ascii = non_ascii || source.has_non_ascii_text();

  DSRDocument document(DSRTypes::DT_ComprehensiveSR);
  check(document.createNewSeriesInStudy(source.study_instance_uid.c_str()), out_file,
        concat("the image's StudyInstanceUID \"", source.study_instance_uid, "\""));
  if (non_ascii) check(document.setSpecificCharacterSetType(DSRTypes::CS_UTF8), out_file, "SpecificCharacterSet");
  check(document.setManufacturer("vitpipe"), out_file, "Manufacturer");
  check(document.setSeriesDescription("vitpipe findings"), out_file, "SeriesDescription");
  check(document.setSeriesNumber(kSeriesNumber), out_file, "SeriesNumber");
  check(document.setInstanceNumber("1"), out_file, "InstanceNumber");
  check(document.completeDocument(), out_file, "the completion flag COMPLETE");
  check(document.getCurrentRequestedProcedureEvidence().addItem(
            source.study_instance_uid.c_str(), source.series_instance_uid.c_str(), source.sop_class_uid.c_str(),
            source.sop_instance_uid.c_str()),
        out_file, "the image in CurrentRequestedProcedureEvidenceSequence");

  DSRDocumentTree& tree = document.getTree();
  VP_REQUIRE(tree.addContentItem(DSRTypes::RT_isRoot, DSRTypes::VT_Container) > 0, out_file.string(),
             ": DCMTK refused the root CONTAINER");
  check(tree.getCurrentContentItem().setConceptName(code("18748-4", "LN", "Diagnostic Imaging Report", out_file)),
        out_file, "the document title");
  ReportTree report(tree, out_file);
  report.add_text(code("121106", "DCM", "Comment", out_file), kNotADiagnosis, "the not-a-diagnosis comment");
  report.add_text(code("111001", "DCM", "Algorithm Name", out_file), content.algorithm_name, "Algorithm Name");
  report.add_text(code("111003", "DCM", "Algorithm Version", out_file), content.algorithm_version, "Algorithm Version");
  report.add(DSRTypes::VT_Image, code("121112", "DCM", "Source of Measurement", out_file), "IMAGE (the image)");
  DSRImageReferenceValue image;
  check(image.setReference(source.sop_class_uid.c_str(), source.sop_instance_uid.c_str()), out_file,
        "the image's SOP class and instance UIDs as a reference");
  check(report.current().setImageReference(image), out_file, "the IMAGE content item");
  report.add(DSRTypes::VT_Container, code("121070", "DCM", "Findings", out_file), "CONTAINER Findings");
  report.descend();
  const DSRCodedEntryValue unit = code("1", "UCUM", "no units", out_file);
  for (const LabelProbability& finding : content.findings) {
    const std::string what = concat("NUM \"", finding.label, "\"");
    const std::string meaning = utf8_prefix(finding.label, kMaxCodeMeaningBytes);
    report.add(DSRTypes::VT_Num, code(finding_code_value(finding.label), kFindingCodingScheme, meaning, out_file),
               what);
    check(report.current().setNumericValue(probability_value(finding.probability, unit, out_file, what)), out_file,
          what);
  }

  DcmFileFormat file;
  DcmDataset& dataset = *file.getDataset();
  check(document.write(dataset), out_file, "the SR document (DSRDocument::write)");
  // DSRDocument makes its own series and instance UIDs; the caller's are the ones a retry must resend.
  check(dataset.putAndInsertString(DCM_SeriesInstanceUID, content.series_instance_uid.c_str()), out_file,
        "SeriesInstanceUID");
  check(dataset.putAndInsertString(DCM_SOPInstanceUID, content.sop_instance_uid.c_str()), out_file, "SOPInstanceUID");
  copy_patient_and_study(source, dataset, out_file);
  write_dicom_file_atomically(file, out_file);
}

}  // namespace vitpipe
