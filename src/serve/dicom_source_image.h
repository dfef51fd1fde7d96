// What an object vitpipe derives from a DICOM image (the findings SR, the heatmap Secondary Capture) takes from it:
// the image's identity, to reference it, and its patient and study attributes, so that a PACS files the new object
// with the image's patient and study (a PACS files an object whose Patient ID differs under another patient).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

class DcmItem;

namespace vitpipe {

struct DicomTextAttribute {
  uint16_t group = 0;
  uint16_t element = 0;
  std::string value;  // UTF-8
};

struct DicomSourceImage {
  std::string sop_class_uid;
  std::string sop_instance_uid;
  std::string study_instance_uid;
  std::string series_instance_uid;
  // Patient and General Study module attributes the image has (StudyInstanceUID apart), converted to UTF-8 from the
  // image's character set, in the order they are written.
  std::vector<DicomTextAttribute> patient_and_study;
  // For an image object derived from it (General Series): empty where the image does not say. `laterality` is the
  // image's Laterality, else its Image Laterality.
  std::string body_part_examined;
  std::string laterality;

  bool has_non_ascii_text() const;
};

// Reads the header of a DICOM file (the pixel data is not loaded). Throws vitpipe::Error naming the file and the
// attribute when it is not DICOM, lacks one of the four UIDs, or has text that cannot be converted to UTF-8.
DicomSourceImage read_dicom_source_image(const std::filesystem::path& image_file);

// Puts the source's StudyInstanceUID and patient and study attributes into `dataset`, replacing what is there;
// the type 2 ones the image lacks are written empty, as their modules require. `out_file` names errors.
void copy_patient_and_study(const DicomSourceImage& source, DcmItem& dataset, const std::filesystem::path& out_file);

}  // namespace vitpipe
