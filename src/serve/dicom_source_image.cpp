#include "serve/dicom_source_image.h"

// clang-format off
#include <dcmtk/config/osconfig.h>  // must come first
// clang-format on
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcdict.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcitem.h>
#include <dcmtk/dcmdata/dcspchrs.h>
#include <dcmtk/oflog/oflog.h>

#include <cstdio>
#include <mutex>

#include "data/dicom_attribute_text.h"
#include "serve/dicom_text.h"
#include "util/error.h"

namespace vitpipe {
namespace {

struct CopiedAttribute {
  DcmTagKey key;
  bool type2;  // written (empty when the image lacks it) by the SR and SC modules that hold it
};

// Patient module and General Study module (PS3.3 C.7.1.1, C.7.2.1), StudyInstanceUID apart.
const CopiedAttribute kCopiedAttributes[] = {
    {DCM_PatientName, true},        {DCM_PatientID, true},
    {DCM_IssuerOfPatientID, false}, {DCM_PatientBirthDate, true},
    {DCM_PatientSex, true},         {DCM_StudyDate, true},
    {DCM_StudyTime, true},          {DCM_StudyID, true},
    {DCM_AccessionNumber, true},    {DCM_ReferringPhysicianName, true},
    {DCM_StudyDescription, false},
};

// DCMTK's log off: errors reach the caller as one vitpipe::Error (as in data/dicom_decoder.cpp).
void initialise_dcmtk() {
  static std::once_flag once;
  std::call_once(once, [] { OFLog::configure(OFLogger::OFF_LOG_LEVEL); });
  VP_REQUIRE(dcmDataDict.isDictionaryLoaded(), "DCMTK's data dictionary is not loaded (", DCM_DICT_DEFAULT_PATH,
             "); DICOM files cannot be read or written without it");
}

std::string required_uid(DcmItem& dataset, const DcmTagKey& key, const std::filesystem::path& image_file) {
  OFString value;
  dataset.findAndGetOFString(key, value);
  const std::string uid = trimmed_dicom_value(value);
  VP_REQUIRE(!uid.empty(), image_file.string(), ": ", dicom_attribute_label(key),
             " is missing or empty; an object derived from the image needs it to reference the image and join its "
             "study");
  return uid;
}

}  // namespace

bool DicomSourceImage::has_non_ascii_text() const {
  for (const DicomTextAttribute& attribute : patient_and_study) {
    if (!is_ascii(attribute.value)) return true;
  }
  return false;
}

DicomSourceImage read_dicom_source_image(const std::filesystem::path& image_file) {
  initialise_dcmtk();
  const std::string name = image_file.string();
  DcmFileFormat file;
  // Values longer than 4 KB (the pixel data) stay on disk: only the header is wanted.
  const OFCondition loaded = file.loadFile(OFFilename(name.c_str()), EXS_Unknown, EGL_noChange, 4096);
  VP_REQUIRE(loaded.good(), name, ": not a readable DICOM file (DCMTK: ", loaded.text(), ")");
  DcmDataset& dataset = *file.getDataset();

  OFString character_set;
  dataset.findAndGetOFStringArray(DCM_SpecificCharacterSet, character_set);
  const std::string declared = trimmed_dicom_value(character_set);
  if (!declared.empty() && declared != "ISO_IR 192" && declared != "ISO_IR 6") {
    const OFCondition converted = dataset.convertToUTF8();
    VP_REQUIRE(converted.good(), name, ": cannot convert its text from ",
               dicom_attribute_label(DCM_SpecificCharacterSet), " \"", declared,
               "\" to UTF-8 (DCMTK: ", converted.text(),
               DcmSpecificCharacterSet::isConversionAvailable() ? ")" : "; DCMTK was built without conversion)");
  }

  DicomSourceImage source;
  source.sop_class_uid = required_uid(dataset, DCM_SOPClassUID, image_file);
  source.sop_instance_uid = required_uid(dataset, DCM_SOPInstanceUID, image_file);
  source.study_instance_uid = required_uid(dataset, DCM_StudyInstanceUID, image_file);
  source.series_instance_uid = required_uid(dataset, DCM_SeriesInstanceUID, image_file);
  for (const CopiedAttribute& attribute : kCopiedAttributes) {
    OFString value;
    if (dataset.findAndGetOFStringArray(attribute.key, value).bad()) continue;
    const std::string text = trimmed_dicom_value(value);
    if (text.empty()) continue;
    // Without a declared character set only ASCII is valid; bytes beyond it would be mislabelled as UTF-8.
    VP_REQUIRE(is_valid_utf8(text), name, ": ", dicom_attribute_label(attribute.key),
               " is not valid text in its character set (", dicom_attribute_label(DCM_SpecificCharacterSet), " is \"",
               declared, "\")");
    source.patient_and_study.push_back({attribute.key.getGroup(), attribute.key.getElement(), text});
  }
  // Code strings: ASCII by definition, whatever the character set.
  OFString value;
  if (dataset.findAndGetOFString(DCM_BodyPartExamined, value).good())
    source.body_part_examined = trimmed_dicom_value(value);
  for (const DcmTagKey& key : {DCM_Laterality, DCM_ImageLaterality}) {
    if (source.laterality.empty() && dataset.findAndGetOFString(key, value).good())
      source.laterality = trimmed_dicom_value(value);
  }
  return source;
}

void copy_patient_and_study(const DicomSourceImage& source, DcmItem& dataset, const std::filesystem::path& out_file) {
  const auto put = [&](const DcmTagKey& key, const std::string& value) {
    const OFCondition status = dataset.putAndInsertString(DcmTag(key), value.c_str(), OFTrue);
    VP_REQUIRE(status.good(), out_file.string(), ": DCMTK refused ", dicom_attribute_label(key), " \"", value,
               "\" copied from the image (", status.text(), ")");
  };
  put(DCM_StudyInstanceUID, source.study_instance_uid);
  for (const CopiedAttribute& attribute : kCopiedAttributes) {
    const DicomTextAttribute* found = nullptr;
    for (const DicomTextAttribute& copied : source.patient_and_study) {
      if (copied.group == attribute.key.getGroup() && copied.element == attribute.key.getElement()) found = &copied;
    }
    if (found != nullptr) {
      put(attribute.key, found->value);
    } else if (attribute.type2) {
      put(attribute.key, "");
    }
  }
}

}  // namespace vitpipe
