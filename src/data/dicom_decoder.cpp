#include "data/dicom_decoder.h"

// clang-format off
#include <dcmtk/config/osconfig.h>  // must come first
// clang-format on
#include <dcmtk/dcmdata/dcdatset.h>
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcdict.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcmetinf.h>
#include <dcmtk/dcmdata/dcpixel.h>
#include <dcmtk/dcmdata/dcpixseq.h>
#include <dcmtk/dcmdata/dcpxitem.h>
#include <dcmtk/dcmdata/dcrledrg.h>
#include <dcmtk/dcmdata/dcxfer.h>
#include <dcmtk/dcmjpeg/djdecode.h>
#include <dcmtk/dcmjpls/djdecode.h>
#include <dcmtk/oflog/oflog.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>

#include "data/dicom_attribute_text.h"
#include "data/dicom_deflate.h"
#include "data/dicom_jpeg2000.h"
#include "data/dicom_memory_stream.h"
#include "data/dicom_nesting.h"
#include "data/dicom_pixels.h"
#include "util/decode_memory.h"
#include "util/error.h"
#include "util/size_limits.h"

namespace vitpipe {
namespace {

constexpr size_t kPreambleBytes = 128;

void initialise_dcmtk() {
  static std::once_flag once;
  std::call_once(once, [] {
    OFLog::configure(OFLogger::OFF_LOG_LEVEL);  // errors reach the user as one line from us, not DCMTK's log
    DJDecoderRegistration::registerCodecs();
    DJLSDecoderRegistration::registerCodecs();
    DcmRLEDecoderRegistration::registerCodecs();
  });
  VP_REQUIRE(dcmDataDict.isDictionaryLoaded(), "DCMTK's data dictionary is not loaded (", DCM_DICT_DEFAULT_PATH,
             " from the libdcmtk17 package, or $DCMDICTPATH); DICOM files cannot be read without it");
}

// Why DCMTK stopped reading: the last element it started, whose value it could not read in full.
std::string read_failure(DcmFileFormat& file, size_t size, const OFCondition& status) {
  for (DcmItem* item : {static_cast<DcmItem*>(file.getDataset()), static_cast<DcmItem*>(file.getMetaInfo())}) {
    if (item == nullptr || item->card() == 0) continue;
    DcmElement* last = item->getElement(item->card() - 1);
    return concat("not a readable DICOM file (DCMTK: ", status.text(), "); reading stopped at element ",
                  dicom_attribute_label(last->getTag()), ", whose length field says ", last->getLengthField(),
                  " bytes (the whole file ", "has ", size, "): the file is truncated or a length field is wrong");
  }
  return concat("not a readable DICOM file (DCMTK: ", status.text(), ") in its file meta information");
}

class Attributes {
 public:
  Attributes(DcmItem& item, const std::string& name) : item_(item), name_(name) {}

  bool has(const DcmTagKey& key) { return item_.tagExistsWithValue(key); }

  int64_t required_us(const DcmTagKey& key) {
    Uint16 value = 0;
    const OFCondition status = item_.findAndGetUint16(key, value);
    VP_REQUIRE(status.good(), name_, ": ", dicom_attribute_label(key), " is missing or unreadable (", status.text(),
               ")");
    return value;
  }
  int64_t optional_is(const DcmTagKey& key, int64_t fallback) {
    if (!has(key)) return fallback;
    Sint32 value = 0;
    const OFCondition status = item_.findAndGetSint32(key, value);
    VP_REQUIRE(status.good(), name_, ": ", dicom_attribute_label(key), " is not an integer (", status.text(), ")");
    return value;
  }
  double optional_ds(const DcmTagKey& key, double fallback) {
    if (!has(key)) return fallback;
    return number(key, 0);
  }
  double number(const DcmTagKey& key, unsigned long position) {
    Float64 value = 0;
    const OFCondition status = item_.findAndGetFloat64(key, value, position);
    VP_REQUIRE(status.good() && std::isfinite(value), name_, ": ", dicom_attribute_label(key), " value ", position + 1,
               " is not a number (", status.text(), ")");
    return value;
  }
  unsigned long multiplicity(const DcmTagKey& key) {
    DcmElement* element = nullptr;
    if (item_.findAndGetElement(key, element).bad() || element == nullptr) return 0;
    return element->getVM();
  }
  std::string text(const DcmTagKey& key) {
    OFString value;
    if (item_.findAndGetOFStringArray(key, value).bad()) return "";
    return trimmed_dicom_value(value);
  }

  // A LUT of the Modality LUT or VOI LUT Sequence item `item_` (LUT Descriptor + LUT Data).
  DicomLut lut(bool signed_pixels, const std::string& where) {
    DcmElement* descriptor = nullptr;
    VP_REQUIRE(item_.findAndGetElement(DCM_LUTDescriptor, descriptor).good() && descriptor != nullptr &&
                   descriptor->getVM() == 3,
               name_, ": ", where, " ", dicom_attribute_label(DCM_LUTDescriptor),
               " is missing or does not hold 3 values");
    // The first input value is SS when the LUT's input may be negative (PS3.3 C.11.1.1); an implicit-VR file does
    // not say, so the Pixel Representation decides.
    const DcmEVR vr = descriptor->ident();
    const bool first_signed = vr == EVR_SS || (vr != EVR_US && signed_pixels);
    Uint16 values[3] = {0, 0, 0};
    for (unsigned long i = 0; i < 3; ++i) {
      if (vr == EVR_SS) {
        Sint16 v = 0;
        VP_REQUIRE(descriptor->getSint16(v, i).good(), name_, ": ", where, " ",
                   dicom_attribute_label(DCM_LUTDescriptor), " unreadable");
        values[i] = static_cast<Uint16>(v);
      } else {
        VP_REQUIRE(descriptor->getUint16(values[i], i).good(), name_, ": ", where, " ",
                   dicom_attribute_label(DCM_LUTDescriptor), " unreadable");
      }
    }
    DicomLut lut;
    lut.entries = values[0] == 0 ? 65536 : values[0];
    lut.first_input = first_signed ? static_cast<int64_t>(static_cast<Sint16>(values[1])) : values[1];
    lut.bits = values[2];
    VP_REQUIRE(lut.bits >= 1 && lut.bits <= 16, name_, ": ", where, " ", dicom_attribute_label(DCM_LUTDescriptor),
               " says entries of ", lut.bits, " bits (expected 1..16)");
    const Uint16* data = nullptr;
    unsigned long count = 0;
    const OFCondition status = item_.findAndGetUint16Array(DCM_LUTData, data, &count);
    VP_REQUIRE(status.good() && data != nullptr, name_, ": ", where, " ", dicom_attribute_label(DCM_LUTData),
               " is missing (", status.text(), ")");
    VP_REQUIRE(static_cast<int64_t>(count) == lut.entries, name_, ": ", where, " ", dicom_attribute_label(DCM_LUTData),
               " holds ", count, " entries, its ", dicom_attribute_label(DCM_LUTDescriptor), " says ", lut.entries);
    lut.data.assign(data, data + count);
    return lut;
  }

 private:
  DcmItem& item_;
  const std::string& name_;
};

const std::set<E_TransferSyntax>& decodable_syntaxes() {
  static const std::set<E_TransferSyntax> syntaxes = {EXS_LittleEndianImplicit,
                                                      EXS_LittleEndianExplicit,
                                                      EXS_BigEndianExplicit,
                                                      EXS_DeflatedLittleEndianExplicit,
                                                      EXS_JPEGProcess1,
                                                      EXS_JPEGProcess2_4,
                                                      EXS_JPEGProcess14,
                                                      EXS_JPEGProcess14SV1,
                                                      EXS_JPEGLSLossless,
                                                      EXS_JPEGLSLossy,
                                                      EXS_RLELossless,
                                                      EXS_JPEG2000LosslessOnly,
                                                      EXS_JPEG2000};
  return syntaxes;
}

constexpr const char* kDecodableList =
    "uncompressed (implicit/explicit VR little endian, explicit big endian), deflate, JPEG baseline, extended and "
    "lossless, JPEG-LS, JPEG 2000 and RLE";

// The J2K codestream of frame `frame` (0-based): its fragments, found through the Basic Offset Table when there is
// more than one frame.
std::vector<uint8_t> jpeg2000_frame_bytes(DcmPixelData& pixel_data, E_TransferSyntax xfer, int64_t frames,
                                          const std::string& name) {
  DcmPixelSequence* sequence = nullptr;
  VP_REQUIRE(pixel_data.getEncapsulatedRepresentation(xfer, nullptr, sequence).good() && sequence != nullptr, name,
             ": ", dicom_attribute_label(DCM_PixelData),
             " is not encapsulated as its JPEG 2000 transfer syntax requires");
  const unsigned long items = sequence->card();
  VP_REQUIRE(items >= 2, name, ": ", dicom_attribute_label(DCM_PixelData), " holds no JPEG 2000 fragment");
  DcmPixelItem* table = nullptr;
  VP_REQUIRE(sequence->getItem(table, 0).good(), name, ": ", dicom_attribute_label(DCM_PixelData),
             ": no Basic Offset Table item");
  unsigned long last = items - 1;  // fragments 1..last belong to the frame
  if (frames > 1) {
    const Uint32 table_bytes = table->getLength();
    if (table_bytes >= 8) {
      Uint8* raw = nullptr;
      VP_REQUIRE(table->getUint8Array(raw).good() && raw != nullptr, name, ": unreadable Basic Offset Table");
      uint32_t second_frame = 0;  // offset of frame 2, from the first fragment's item tag
      std::memcpy(&second_frame, raw + 4, 4);
      uint64_t position = 0;
      for (unsigned long i = 1; i < items; ++i) {
        if (position >= second_frame) {
          last = i - 1;
          break;
        }
        DcmPixelItem* fragment = nullptr;
        VP_REQUIRE(sequence->getItem(fragment, i).good(), name, ": unreadable JPEG 2000 fragment ", i);
        position += 8 + static_cast<uint64_t>(fragment->getLength());
      }
    } else {
      VP_REQUIRE(static_cast<int64_t>(items - 1) == frames, name, ": ", frames, " JPEG 2000 frames in ", items - 1,
                 " fragments without a Basic Offset Table: cannot find frame 1");
      last = 1;
    }
  }
  std::vector<uint8_t> codestream;
  for (unsigned long i = 1; i <= last; ++i) {
    DcmPixelItem* fragment = nullptr;
    Uint8* bytes = nullptr;
    VP_REQUIRE(sequence->getItem(fragment, i).good() && fragment->getUint8Array(bytes).good(), name,
               ": unreadable JPEG 2000 fragment ", i);
    if (bytes != nullptr) codestream.insert(codestream.end(), bytes, bytes + fragment->getLength());
  }
  return codestream;
}

// DCMTK 3.6.7's RLE decoder trusts the frame's RLE header: it copies 64 bytes from a shorter fragment, starts a
// segment at any offset the header names, and reads the byte before its output when a segment decodes to nothing.
// The header is checked here first (PS3.5 Annex G): one segment per byte of each sample, the first at byte 64,
// offsets increasing inside the fragment, each segment with a run to decode.
void check_rle_frame(DcmPixelData& pixel_data, const DicomPixelModule& m, const std::string& name) {
  DcmPixelSequence* sequence = nullptr;
  VP_REQUIRE(pixel_data.getEncapsulatedRepresentation(EXS_RLELossless, nullptr, sequence).good() && sequence != nullptr,
             name, ": ", dicom_attribute_label(DCM_PixelData), " is not encapsulated as RLE Lossless requires");
  DcmPixelItem* fragment = nullptr;
  Uint8* bytes = nullptr;
  VP_REQUIRE(sequence->card() >= 2 && sequence->getItem(fragment, 1).good() && fragment->getUint8Array(bytes).good(),
             name, ": ", dicom_attribute_label(DCM_PixelData), " holds no RLE fragment");
  const uint64_t length = fragment->getLength();
  VP_REQUIRE(bytes != nullptr && length >= 64, name, ": the RLE fragment of ", dicom_attribute_label(DCM_PixelData),
             " has ", length, " bytes, fewer than its 64-byte header");
  uint32_t header[16];
  std::memcpy(header, bytes, sizeof header);  // little-endian, as the host
  const uint32_t expected = static_cast<uint32_t>(m.samples_per_pixel * (m.bits_allocated / 8));
  VP_REQUIRE(header[0] == expected, name, ": the RLE header of ", dicom_attribute_label(DCM_PixelData), " names ",
             header[0], " segments; ", dicom_attribute_label(DCM_SamplesPerPixel), " x ",
             dicom_attribute_label(DCM_BitsAllocated), " / 8 needs ", expected);
  for (uint32_t i = 1; i <= header[0]; ++i) {
    const uint64_t lowest = i == 1 ? 64 : uint64_t{header[i - 1]} + 1;
    VP_REQUIRE(header[i] >= lowest && header[i] < length, name, ": the RLE header of ",
               dicom_attribute_label(DCM_PixelData), " puts segment ", i, " at byte ", header[i], " of a ", length,
               "-byte fragment (expected increasing offsets from 64 inside it)");
  }
  for (uint32_t i = 1; i <= header[0]; ++i) {
    const uint64_t end = i == header[0] ? length : header[i + 1];
    uint64_t control = header[i];  // -128 is a no-op; any other control byte makes output from the byte after it
    while (control < end && bytes[control] == 0x80) ++control;
    VP_REQUIRE(control + 1 < end, name, ": RLE segment ", i, " of ", dicom_attribute_label(DCM_PixelData),
               " decodes to nothing");
  }
}

}  // namespace

bool has_dicom_preamble(const uint8_t* data, size_t size) {
  return size >= kPreambleBytes + 4 && std::memcmp(data + kPreambleBytes, "DICM", 4) == 0;
}

namespace {

// Refuses sequences nested too deep (DCMTK reads them by recursion), then reads the file meta information from
// `stream`, which is left at the data set.
OFCondition read_file_meta(const uint8_t* data, size_t size, const std::string& name, DicomMemoryStream& stream,
                           DcmMetaInfo& meta) {
  initialise_dcmtk();
  check_dicom_nesting(data, size, kPreambleBytes + 4, {}, name, true);
  meta.transferInit();
  const OFCondition status = meta.read(stream, EXS_Unknown, EGL_noChange, kDicomParseReadLimit);
  meta.transferEnd();
  return status;
}

}  // namespace

DicomFileIdentity read_dicom_file_identity(const uint8_t* data, size_t size, const std::string& name) {
  VP_REQUIRE(has_dicom_preamble(data, size), name, ": not a DICOM file (no \"DICM\" after the 128-byte preamble)");
  DicomMemoryStream stream(data, size);
  DcmFileFormat file;
  DcmMetaInfo& meta = *file.getMetaInfo();
  const OFCondition status = read_file_meta(data, size, name, stream, meta);
  VP_REQUIRE(status.good(), name, ": ", read_failure(file, size, status));
  DicomFileIdentity identity;
  for (auto [tag, out] : {std::pair{DCM_MediaStorageSOPClassUID, &identity.sop_class_uid},
                          std::pair{DCM_MediaStorageSOPInstanceUID, &identity.sop_instance_uid},
                          std::pair{DCM_TransferSyntaxUID, &identity.transfer_syntax_uid}}) {
    OFString value;
    meta.findAndGetOFString(tag, value);
    *out = trimmed_dicom_value(value);
    VP_REQUIRE(!out->empty(), name, ": the file meta information lacks ", dicom_attribute_label(tag));
  }
  return identity;
}

void check_dicom_file_nesting(const uint8_t* data, size_t size, const std::string& name) {
  if (!has_dicom_preamble(data, size)) return;
  DicomMemoryStream stream(data, size);
  DcmFileFormat file;
  DcmMetaInfo& meta = *file.getMetaInfo();
  const OFCondition status = read_file_meta(data, size, name, stream, meta);
  if (status.bad()) return;
  OFString uid;
  meta.findAndGetOFString(DCM_TransferSyntaxUID, uid);
  const DcmXfer syntax(trimmed_dicom_value(uid).c_str());
  const auto start = static_cast<size_t>(stream.tell());
  if (syntax.getXfer() == EXS_DeflatedLittleEndianExplicit) {
    const std::vector<uint8_t> inflated = inflate_dicom_data_set(data + start, size - start, name);
    check_dicom_nesting(inflated.data(), inflated.size(), 0, {}, name);
  } else if (syntax.getXfer() != EXS_Unknown) {
    check_dicom_nesting(data, size, start, {syntax.isExplicitVR() != OFFalse, syntax.isLittleEndian() != OFFalse},
                        name);
  }
}

DecodedImage decode_dicom(const uint8_t* data, size_t size, const std::string& name, const ImageReadOptions& options) {
  VP_REQUIRE(has_dicom_preamble(data, size), name, ": not a DICOM file (no \"DICM\" after the 128-byte preamble)");
  initialise_dcmtk();
  check_dicom_nesting(data, size, kPreambleBytes + 4, {}, name, true);
  DicomMemoryStream stream(data, size);
  std::vector<uint8_t> inflated;  // declared before `file`, whose deferred values may point into it (or `data`)
  DcmFileFormat file;
  // A value over the limit is skipped and read when used: a length field beyond the end of the file is then refused
  // before anything of that length is allocated.
  DcmMetaInfo& meta = *file.getMetaInfo();
  meta.transferInit();
  OFCondition status = meta.read(stream, EXS_Unknown, EGL_noChange, kDicomParseReadLimit);
  meta.transferEnd();
  VP_REQUIRE(status.good(), name, ": ", read_failure(file, size, status));

  // The syntax the file declares: DCMTK guesses an encoding for a UID it does not know and reads on.
  OFString uid;
  meta.findAndGetOFString(DCM_TransferSyntaxUID, uid);
  const DcmXfer syntax(trimmed_dicom_value(uid).c_str());
  const E_TransferSyntax xfer = syntax.getXfer();
  VP_REQUIRE(decodable_syntaxes().count(xfer) > 0, name, ": ", dicom_attribute_label(DCM_TransferSyntaxUID), " ",
             trimmed_dicom_value(uid), " (", xfer == EXS_Unknown ? "unknown to DCMTK" : syntax.getXferName(),
             ") cannot be decoded; vitpipe reads ", kDecodableList);

  DcmDataset& dataset = *file.getDataset();
  dataset.transferInit();
  if (xfer == EXS_DeflatedLittleEndianExplicit) {
    // Inflated here rather than through DCMTK's filter, which loads every value whatever its length field says.
    const auto start = static_cast<size_t>(stream.tell());
    inflated = inflate_dicom_data_set(data + start, size - start, name);
    check_dicom_nesting(inflated.data(), inflated.size(), 0, {}, name);
    DicomMemoryStream inflated_stream(inflated.data(), inflated.size());
    status = dataset.read(inflated_stream, EXS_LittleEndianExplicit, EGL_noChange, kDicomParseReadLimit);
  } else {
    check_dicom_nesting(data, size, static_cast<size_t>(stream.tell()),
                        {syntax.isExplicitVR() != OFFalse, syntax.isLittleEndian() != OFFalse}, name);
    status = dataset.read(stream, xfer, EGL_noChange, kDicomParseReadLimit);
  }
  dataset.transferEnd();
  VP_REQUIRE(status.good(), name, ": ",
             read_failure(file, xfer == EXS_DeflatedLittleEndianExplicit ? inflated.size() : size, status));

  Attributes a(dataset, name);
  DicomPixelModule m;
  m.rows = a.required_us(DCM_Rows);
  m.columns = a.required_us(DCM_Columns);
  VP_REQUIRE(m.rows > 0 && m.columns > 0, name, ": ", dicom_attribute_label(DCM_Rows), " x ",
             dicom_attribute_label(DCM_Columns), " is ", m.rows, " x ", m.columns, ": an empty image");
  const int64_t max_pixels = max_image_pixels();
  VP_REQUIRE(m.rows * m.columns <= max_pixels, name, ": ", dicom_attribute_label(DCM_Rows), " x ",
             dicom_attribute_label(DCM_Columns), " = ", m.rows, " x ", m.columns, " = ", m.rows * m.columns,
             " pixels, more than the limit of ", max_pixels,
             " (refused as a possible decompression bomb; set VITPIPE_MAX_IMAGE_PIXELS to raise it)");
  m.samples_per_pixel = static_cast<int>(a.required_us(DCM_SamplesPerPixel));
  m.photometric = a.text(DCM_PhotometricInterpretation);
  m.bits_allocated = static_cast<int>(a.required_us(DCM_BitsAllocated));
  m.bits_stored = static_cast<int>(a.required_us(DCM_BitsStored));
  m.high_bit = static_cast<int>(a.required_us(DCM_HighBit));
  const int64_t representation = a.required_us(DCM_PixelRepresentation);
  VP_REQUIRE(m.samples_per_pixel == 1 || m.samples_per_pixel == 3, name, ": ",
             dicom_attribute_label(DCM_SamplesPerPixel), " is ", m.samples_per_pixel, " (expected 1 or 3)");
  VP_REQUIRE(m.bits_allocated == 8 || m.bits_allocated == 16, name, ": ", dicom_attribute_label(DCM_BitsAllocated),
             " is ", m.bits_allocated, "; vitpipe reads 8 or 16");
  VP_REQUIRE(m.bits_stored >= 1 && m.bits_stored <= m.bits_allocated, name, ": ", dicom_attribute_label(DCM_BitsStored),
             " is ", m.bits_stored, " (expected 1..", dicom_attribute_label(DCM_BitsAllocated), " = ", m.bits_allocated,
             ")");
  VP_REQUIRE(m.high_bit >= m.bits_stored - 1 && m.high_bit < m.bits_allocated, name, ": ",
             dicom_attribute_label(DCM_HighBit), " is ", m.high_bit, " (expected ", m.bits_stored - 1, "..",
             m.bits_allocated - 1, ")");
  VP_REQUIRE(representation == 0 || representation == 1, name, ": ", dicom_attribute_label(DCM_PixelRepresentation),
             " is ", representation, " (expected 0 or 1)");
  m.is_signed = representation == 1;
  // Before any pixel buffer: the stored frame (decompressed if it is not), its working copy and the result.
  reserve_decode_memory(m.rows * m.columns * m.samples_per_pixel * (2 * (m.bits_allocated / 8) + 1), name);
  if (m.samples_per_pixel == 3) {
    m.planar_configuration =
        static_cast<int>(a.has(DCM_PlanarConfiguration) ? a.required_us(DCM_PlanarConfiguration) : 0);
    VP_REQUIRE(m.planar_configuration == 0 || m.planar_configuration == 1, name, ": ",
               dicom_attribute_label(DCM_PlanarConfiguration), " is ", m.planar_configuration, " (expected 0 or 1)");
    VP_REQUIRE(m.bits_allocated == 8 && !m.is_signed, name, ": colour images must have 8 unsigned bits (",
               dicom_attribute_label(DCM_BitsAllocated), " is ", m.bits_allocated, ")");
  } else {
    VP_REQUIRE(m.photometric == "MONOCHROME1" || m.photometric == "MONOCHROME2", name, ": ",
               dicom_attribute_label(DCM_PhotometricInterpretation), " is \"", m.photometric,
               "\" for one sample per pixel; vitpipe reads MONOCHROME1 and MONOCHROME2");
  }
  const int64_t frames = a.optional_is(DCM_NumberOfFrames, 1);
  VP_REQUIRE(frames >= 1, name, ": ", dicom_attribute_label(DCM_NumberOfFrames), " is ", frames);
  VP_REQUIRE(frames == 1 || options.dicom_first_frame, name, ": ", dicom_attribute_label(DCM_NumberOfFrames), " is ",
             frames, ": a multi-frame image; vitpipe reads single images (--dicom-first-frame reads the first frame)");

  if (m.gray()) {
    DcmItem* modality = nullptr;
    if (dataset.findAndGetSequenceItem(DCM_ModalityLUTSequence, modality, 0).good() && modality != nullptr) {
      m.modality_lut = Attributes(*modality, name).lut(m.is_signed, dicom_attribute_label(DCM_ModalityLUTSequence));
    } else {
      m.rescale_slope = a.optional_ds(DCM_RescaleSlope, 1.0);
      m.rescale_intercept = a.optional_ds(DCM_RescaleIntercept, 0.0);
    }
    const unsigned long centres = a.multiplicity(DCM_WindowCenter), widths = a.multiplicity(DCM_WindowWidth);
    VP_REQUIRE(centres == widths, name, ": ", dicom_attribute_label(DCM_WindowCenter), " has ", centres,
               " value(s) but ", dicom_attribute_label(DCM_WindowWidth), " has ", widths);
    const std::string function = a.text(DCM_VOILUTFunction);
    if (function == "LINEAR_EXACT") {
      m.voi_function = VoiFunction::linear_exact;
    } else if (function == "SIGMOID") {
      m.voi_function = VoiFunction::sigmoid;
    } else {
      VP_REQUIRE(function.empty() || function == "LINEAR", name, ": ", dicom_attribute_label(DCM_VOILUTFunction),
                 " is \"", function, "\" (expected LINEAR, LINEAR_EXACT or SIGMOID)");
    }
    for (unsigned long i = 0; i < centres; ++i) {
      DicomWindow window{a.number(DCM_WindowCenter, i), a.number(DCM_WindowWidth, i)};
      const bool linear = m.voi_function == VoiFunction::linear;
      VP_REQUIRE(linear ? window.width >= 1 : window.width > 0, name, ": ", dicom_attribute_label(DCM_WindowWidth),
                 " value ", i + 1, " is ", window.width,
                 linear ? " (a LINEAR window needs a width >= 1)" : " (must be > 0)");
      m.windows.push_back(window);
    }
    DcmSequenceOfItems* voi = nullptr;
    if (dataset.findAndGetSequence(DCM_VOILUTSequence, voi).good() && voi != nullptr) {
      for (unsigned long i = 0; i < voi->card(); ++i)
        m.voi_luts.push_back(Attributes(*voi->getItem(i), name)
                                 .lut(m.is_signed, concat(dicom_attribute_label(DCM_VOILUTSequence), " item ", i + 1)));
    }
  }

  DcmElement* element = nullptr;
  VP_REQUIRE(dataset.findAndGetElement(DCM_PixelData, element).good() && element != nullptr &&
                 element->ident() == EVR_PixelData,
             name, ": ", dicom_attribute_label(DCM_PixelData),
             " is missing (or Float/Double Pixel Data, which vitpipe does not read)");
  auto& pixel_data = *static_cast<DcmPixelData*>(element);
  const auto frame_bytes = static_cast<size_t>(m.rows * m.columns * m.samples_per_pixel * (m.bits_allocated / 8));
  std::vector<uint8_t> frame;
  if (xfer == EXS_JPEG2000LosslessOnly || xfer == EXS_JPEG2000) {
    const std::vector<uint8_t> codestream = jpeg2000_frame_bytes(pixel_data, xfer, frames, name);
    frame = decode_jpeg2000_frame(codestream.data(), codestream.size(), m, name);
    m.planar_configuration = 0;  // the decoder interleaves
    if (!m.gray()) {
      VP_REQUIRE(m.photometric == "RGB" || m.photometric == "YBR_RCT" || m.photometric == "YBR_ICT", name, ": ",
                 dicom_attribute_label(DCM_PhotometricInterpretation), " is \"", m.photometric,
                 "\" for JPEG 2000 colour (expected RGB, YBR_RCT or YBR_ICT)");
      m.photometric = "RGB";  // OpenJPEG undoes the component transform
    }
  } else {
    if (!syntax.isEncapsulated()) {
      VP_REQUIRE(pixel_data.getLength() >= frame_bytes, name, ": ", dicom_attribute_label(DCM_PixelData), " holds ",
                 pixel_data.getLength(), " bytes, but ", dicom_attribute_label(DCM_Rows), " x ",
                 dicom_attribute_label(DCM_Columns), " x samples x ", dicom_attribute_label(DCM_BitsAllocated),
                 " / 8 = ", frame_bytes, " bytes are needed for one frame");
    }
    if (xfer == EXS_RLELossless) check_rle_frame(pixel_data, m, name);
    frame.resize(frame_bytes + (frame_bytes & 1));  // DCMTK wants an even buffer size
    Uint32 start_fragment = 0;
    OFString model;
    const OFCondition decoded = pixel_data.getUncompressedFrame(&dataset, 0, start_fragment, frame.data(),
                                                                static_cast<Uint32>(frame.size()), model, nullptr);
    VP_REQUIRE(decoded.good(), name, ": cannot decode ", dicom_attribute_label(DCM_PixelData), " (",
               syntax.getXferName(), "): ", decoded.text());
    const std::string decoded_model = trimmed_dicom_value(model);
    if (syntax.isEncapsulated() && !decoded_model.empty()) m.photometric = decoded_model;
    if (!m.gray()) {
      VP_REQUIRE(m.photometric == "RGB", name, ": ", dicom_attribute_label(DCM_PhotometricInterpretation), " is \"",
                 m.photometric,
                 "\"; vitpipe reads colour as RGB (JPEG's YBR_FULL / YBR_FULL_422 is converted by the decoder)");
      // DCMTK's JPEG and JPEG-LS decoders give interleaved samples.
      if (syntax.isEncapsulated() && xfer != EXS_RLELossless) m.planar_configuration = 0;
    }
  }
  return dicom_frame_to_image(frame.data(), m, options, name);
}

}  // namespace vitpipe
