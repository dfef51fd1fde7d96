// What a DICOM SR names as its algorithm (DCM 111001 "Algorithm Name"): the model, not "vitpipe model". A radiologist
// or an auditor reading the report must be able to tell which weights produced it.
#pragma once

#include <filesystem>
#include <string>

namespace vitpipe {

// "NAME (sha256 PREFIX)": NAME is the title of the model card (README.md's first "# " heading, after any YAML front
// matter) when the directory has one, else the directory's name (its parent's too when it is a run's model/, e.g.
// "base/model"), or `reference` itself for a Hub repo id; PREFIX is the first 12 hex digits of the SHA-256 of
// `weights` (for sharded weights, of their index).
std::string algorithm_name(const std::string& reference, const std::filesystem::path& model_directory,
                           const std::filesystem::path& weights);

}  // namespace vitpipe
