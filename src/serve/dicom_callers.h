// `serve --allowed-callers AE@HOST,AE,...`: who may open an association with the DICOM node. Without the list anyone
// who reaches the port could have reports filed into the PACS under any PatientID.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace vitpipe {

struct DicomCaller {
  std::string ae_title;
  std::vector<std::string> addresses;  // numeric addresses HOST resolves to; empty: from any address
};

// "PACS@10.0.0.5,MODALITY@ct1.example.org,ARCHIVE": HOST is resolved now. Throws vitpipe::Error naming `flag`, the
// entry and the expectation.
std::vector<DicomCaller> parse_dicom_callers(std::string_view text, const char* flag);

}  // namespace vitpipe
