// DICOM unique identifiers (PS3.5 9): new ones for the objects vitpipe writes, and the check of those a caller gives.
#pragma once

#include <string>

namespace vitpipe {

// A fresh UID under DCMTK's site root (DCMTK's dcmGenerateUniqueIdentifier: host id, process id, time, counter).
std::string new_dicom_uid();

// The same UID for the same `seed`, under the UUID root 2.25 (PS3.5 B.2): the decimal of the first 128 bits of the
// seed's SHA-256. What serve derives from an image's UID and the model, so a result made again is the same instance.
std::string derived_dicom_uid(const std::string& seed);

// Refuses anything but a valid UID (digits and dots, no leading zeros, at most 64 characters); `what` names it.
void require_valid_dicom_uid(const std::string& uid, const std::string& what);

}  // namespace vitpipe
