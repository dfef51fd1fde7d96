// The end of an OpenSSL digest as lowercase hex: sha256 of files and fingerprints, git's sha1 of blobs.
#pragma once

#include <openssl/evp.h>

#include <string>

namespace vitpipe {

// Finishes `context` (EVP_DigestFinal_ex) and returns its digest as lowercase hex digits.
std::string finish_digest_hex(EVP_MD_CTX* context);

}  // namespace vitpipe
