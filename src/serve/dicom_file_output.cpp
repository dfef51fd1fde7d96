#include "serve/dicom_file_output.h"

// clang-format off
#include <dcmtk/config/osconfig.h>  // must come first
// clang-format on
#include <dcmtk/dcmdata/dcerror.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcostrmb.h>

#include <vector>

#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe {

void write_dicom_file_atomically(DcmFileFormat& file, const std::filesystem::path& out_file) {
  AtomicFileWriter writer(out_file);
  // DCMTK encodes into a fixed buffer and returns EC_StreamNotifyClient each time it is full.
  std::vector<char> buffer(1 << 16);
  DcmOutputBufferStream stream(buffer.data(), static_cast<offile_off_t>(buffer.size()));
  file.transferInit();
  OFCondition status = EC_StreamNotifyClient;
  while (status == EC_StreamNotifyClient) {
    status = file.write(stream, EXS_LittleEndianExplicit, EET_ExplicitLength, nullptr);
    void* data = nullptr;
    offile_off_t length = 0;
    stream.flushBuffer(data, length);
    if (length > 0) writer.write(data, static_cast<size_t>(length));
  }
  file.transferEnd();
  VP_REQUIRE(status.good(), out_file.string(), ": DCMTK could not encode the DICOM file (", status.text(), ")");
  writer.commit();
}

}  // namespace vitpipe
