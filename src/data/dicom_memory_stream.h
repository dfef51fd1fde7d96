// A DCMTK input stream over a DICOM file held in memory that, unlike DCMTK's own DcmInputBufferStream, can make a
// stream factory. With one, DcmElement::read skips a value longer than the read limit instead of allocating it, and
// the skip is where DCMTK notices a length field larger than what is left of the file: a 300-byte file that declares
// a 4 GB element is refused without a 4 GB allocation. The value is read from memory when it is first used.
#pragma once

// clang-format off
#include <dcmtk/config/osconfig.h>  // must come first
// clang-format on
#include <dcmtk/dcmdata/dcistrmb.h>

#include <cstddef>
#include <cstdint>

namespace vitpipe {

// Values longer than this are read when used, not while parsing (DCMTK's dcmdump uses the same 4 KB).
inline constexpr Uint32 kDicomParseReadLimit = 4096;

class DicomMemoryStream : public DcmInputBufferStream {
 public:
  // `data` must outlive this stream, every factory it makes and every DCMTK object read through them.
  DicomMemoryStream(const uint8_t* data, size_t size, offile_off_t start = 0);

  DcmInputStreamFactory* newFactory() const override;

 private:
  const uint8_t* data_;
  size_t size_;
  const DcmProducer* uncompressed_;  // the buffer itself; another producer means a deflate filter is installed
};

}  // namespace vitpipe
