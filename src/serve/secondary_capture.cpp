#include "serve/secondary_capture.h"

// clang-format off
#include <dcmtk/config/osconfig.h>  // must come first
// clang-format on
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcuid.h>
#include <dcmtk/dcmdata/dcvrda.h>
#include <dcmtk/dcmdata/dcvrtm.h>

#include <utility>

#include "serve/dicom_file_output.h"
#include "serve/dicom_source_image.h"
#include "serve/dicom_text.h"
#include "serve/dicom_uid.h"
#include "util/error.h"

namespace vitpipe {
namespace {

constexpr const char* kSeriesNumber = "9002";  // after the findings SR's 9001

// Now, as DICOM DA and TM (local time, whole seconds).
std::pair<std::string, std::string> now_date_time() {
  OFString date, time;
  VP_REQUIRE(DcmDate::getCurrentDate(date).good() && DcmTime::getCurrentTime(time, OFTrue, OFFalse).good(),
             "DCMTK could not read the current date and time");
  return {date.c_str(), time.c_str()};
}

}  // namespace

void write_heatmap_secondary_capture(const std::filesystem::path& image_file, const DecodedImage& overlay,
                                     const std::string& description, const std::string& sop_instance_uid,
                                     const std::string& series_instance_uid, const std::filesystem::path& out_file) {
  const std::string name = out_file.string();
  require_valid_dicom_uid(sop_instance_uid, name + ": the heatmap's SOP Instance UID");
  require_valid_dicom_uid(series_instance_uid, name + ": the heatmap's Series Instance UID");
  VP_REQUIRE(overlay.channels == 3, name, ": the heatmap overlay has ", overlay.channels, " channels (expected RGB)");
  VP_REQUIRE(overlay.width >= 1 && overlay.height >= 1 && overlay.width <= 65535 && overlay.height <= 65535, name,
             ": the heatmap overlay is ", overlay.width, " x ", overlay.height,
             " (DICOM rows and columns are 1..65535)");
  const auto pixel_bytes = static_cast<size_t>(overlay.width * overlay.height * 3);
  VP_REQUIRE(overlay.pixels.size() == pixel_bytes, name, ": the heatmap overlay holds ", overlay.pixels.size(),
             " bytes, its size says ", pixel_bytes);
  require_single_line_dicom_text(description, name + ": the heatmap description");

  const DicomSourceImage source = read_dicom_source_image(image_file);
  VP_REQUIRE(series_instance_uid != source.series_instance_uid, name,
             ": the heatmap's Series Instance UID is the image's; the heatmap must be a new series");
  VP_REQUIRE(sop_instance_uid != source.sop_instance_uid, name, ": the heatmap's SOP Instance UID is the image's");

  DcmFileFormat file;
  DcmDataset& dataset = *file.getDataset();
  const auto put = [&](const DcmTagKey& key, const std::string& value) {
    const OFCondition status = dataset.putAndInsertString(DcmTag(key), value.c_str(), OFTrue);
    VP_REQUIRE(status.good(), name, ": DCMTK refused ", DcmTag(key).getTagName(), " \"", value, "\" (", status.text(),
               ")");
  };
  const auto put_us = [&](const DcmTagKey& key, Uint16 value) {
    const OFCondition status = dataset.putAndInsertUint16(key, value);
    VP_REQUIRE(status.good(), name, ": DCMTK refused ", DcmTag(key).getTagName(), " ", value, " (", status.text(), ")");
  };
  const std::string series_description = utf8_prefix(description, 64);
  if (!is_ascii(description) || source.has_non_ascii_text()) put(DCM_SpecificCharacterSet, "ISO_IR 192");
  const auto [date, time] = now_date_time();
  // SOP Common
  put(DCM_SOPClassUID, UID_SecondaryCaptureImageStorage);
  put(DCM_SOPInstanceUID, sop_instance_uid);
  put(DCM_InstanceCreationDate, date);
  put(DCM_InstanceCreationTime, time);
  // Patient, General Study
  copy_patient_and_study(source, dataset, out_file);
  // General Series
  put(DCM_Modality, "OT");
  put(DCM_SeriesInstanceUID, series_instance_uid);
  put(DCM_SeriesNumber, kSeriesNumber);
  put(DCM_SeriesDescription, series_description);
  if (!source.body_part_examined.empty()) put(DCM_BodyPartExamined, source.body_part_examined);
  // Type 2C: required for a paired body part, so empty ("unknown") when the image does not name its body part.
  if (!source.laterality.empty() || source.body_part_examined.empty()) put(DCM_Laterality, source.laterality);
  // General Equipment, SC Equipment
  put(DCM_Manufacturer, "vitpipe");
  put(DCM_ConversionType, "WSD");
  // General Image, SC Image
  put(DCM_InstanceNumber, "1");
  put(DCM_PatientOrientation, "");
  put(DCM_ContentDate, date);
  put(DCM_ContentTime, time);
  put(DCM_ImageType, "DERIVED\\SECONDARY");
  put(DCM_DerivationDescription, utf8_prefix(description, 1024));  // ST
  put(DCM_BurnedInAnnotation, "YES");
  DcmItem* reference = nullptr;
  const OFCondition added = dataset.findOrCreateSequenceItem(DCM_SourceImageSequence, reference, -2);
  VP_REQUIRE(added.good() && reference != nullptr, name, ": DCMTK refused SourceImageSequence (", added.text(), ")");
  for (const auto& [key, value] : {std::pair{DCM_ReferencedSOPClassUID, source.sop_class_uid},
                                   std::pair{DCM_ReferencedSOPInstanceUID, source.sop_instance_uid}}) {
    const OFCondition status = reference->putAndInsertString(key, value.c_str());
    VP_REQUIRE(status.good(), name, ": DCMTK refused SourceImageSequence ", DcmTag(key).getTagName(), " (",
               status.text(), ")");
  }
  // Image Pixel
  put_us(DCM_SamplesPerPixel, 3);
  put(DCM_PhotometricInterpretation, "RGB");
  put_us(DCM_PlanarConfiguration, 0);
  put_us(DCM_Rows, static_cast<Uint16>(overlay.height));
  put_us(DCM_Columns, static_cast<Uint16>(overlay.width));
  put_us(DCM_BitsAllocated, 8);
  put_us(DCM_BitsStored, 8);
  put_us(DCM_HighBit, 7);
  put_us(DCM_PixelRepresentation, 0);
  // DCMTK pads an odd length to even itself.
  const OFCondition pixels =
      dataset.putAndInsertUint8Array(DCM_PixelData, overlay.pixels.data(), static_cast<unsigned long>(pixel_bytes));
  VP_REQUIRE(pixels.good(), name, ": DCMTK refused PixelData (", pixels.text(), ")");
  write_dicom_file_atomically(file, out_file);
}

}  // namespace vitpipe
