#include "data/dicom_memory_stream.h"

namespace vitpipe {
namespace {

class DicomMemoryStreamFactory : public DcmInputStreamFactory {
 public:
  DicomMemoryStreamFactory(const uint8_t* data, size_t size, offile_off_t offset)
      : data_(data), size_(size), offset_(offset) {}

  DcmInputStream* create() const override { return new DicomMemoryStream(data_, size_, offset_); }
  DcmInputStreamFactory* clone() const override { return new DicomMemoryStreamFactory(*this); }
  // DCMTK only tells temporary files (deleted with their factory) apart; ours behaves like a file.
  DcmInputStreamFactoryType ident() const override { return DFT_DcmInputFileStreamFactory; }

 private:
  const uint8_t* data_;
  size_t size_;
  offile_off_t offset_;
};

}  // namespace

DicomMemoryStream::DicomMemoryStream(const uint8_t* data, size_t size, offile_off_t start)
    : data_(data), size_(size), uncompressed_(nullptr) {
  setBuffer(data, static_cast<offile_off_t>(size));
  setEos();
  uncompressed_ = currentProducer();
  if (start > 0) skip(start);
}

DcmInputStreamFactory* DicomMemoryStream::newFactory() const {
  // Past a deflate filter, tell() counts inflated bytes: no offset into `data_` to come back to.
  if (currentProducer() != uncompressed_) return nullptr;
  return new DicomMemoryStreamFactory(data_, size_, tell());  // tell() counts the skip to `start` too
}

}  // namespace vitpipe
