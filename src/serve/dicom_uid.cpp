#include "serve/dicom_uid.h"

// clang-format off
#include <dcmtk/config/osconfig.h>  // must come first
// clang-format on
#include <dcmtk/dcmdata/dcuid.h>
#include <dcmtk/dcmdata/dcvrui.h>
#include <openssl/sha.h>

#include <algorithm>

#include "util/error.h"

namespace vitpipe {

std::string new_dicom_uid() {
  char uid[100];
  VP_REQUIRE(dcmGenerateUniqueIdentifier(uid, SITE_INSTANCE_UID_ROOT) != nullptr, "DCMTK could not generate a UID");
  return uid;
}

std::string derived_dicom_uid(const std::string& seed) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(seed.data()), seed.size(), digest);
  unsigned __int128 value = 0;
  for (int i = 0; i < 16; ++i) value = (value << 8) | digest[i];
  std::string decimal;
  do {
    decimal += static_cast<char>('0' + static_cast<int>(value % 10));
    value /= 10;
  } while (value != 0);
  std::reverse(decimal.begin(), decimal.end());
  return "2.25." + decimal;  // at most 5 + 39 characters
}

void require_valid_dicom_uid(const std::string& uid, const std::string& what) {
  VP_REQUIRE(!uid.empty(), what, " is empty (a DICOM UID is required)");
  const OFCondition status = DcmUniqueIdentifier::checkStringValue(OFString(uid.c_str()), "1");
  VP_REQUIRE(status.good(), what, " \"", uid, "\" is not a valid DICOM UID (", status.text(), ")");
}

}  // namespace vitpipe
