#include "serve/dicom_uid.h"

// clang-format off
#include <dcmtk/config/osconfig.h>  // must come first
// clang-format on
#include <dcmtk/dcmdata/dcuid.h>
#include <dcmtk/dcmdata/dcvrui.h>

#include "util/error.h"

namespace vitpipe {

std::string new_dicom_uid() {
  char uid[100];
  VP_REQUIRE(dcmGenerateUniqueIdentifier(uid, SITE_INSTANCE_UID_ROOT) != nullptr, "DCMTK could not generate a UID");
  return uid;
}

void require_valid_dicom_uid(const std::string& uid, const std::string& what) {
  VP_REQUIRE(!uid.empty(), what, " is empty (a DICOM UID is required)");
  const OFCondition status = DcmUniqueIdentifier::checkStringValue(OFString(uid.c_str()), "1");
  VP_REQUIRE(status.good(), what, " \"", uid, "\" is not a valid DICOM UID (", status.text(), ")");
}

}  // namespace vitpipe
