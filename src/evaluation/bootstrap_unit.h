// What a bootstrap resamples. Images of one patient are not independent (one patient can hold dozens of a split's
// images), so intervals resample patients wherever the data knows them, each drawn patient bringing all its images
// (a cluster bootstrap); images are resampled only where no patient ids exist, or when asked for.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "evaluation/ranking_metrics.h"

namespace vitpipe {

enum class BootstrapUnit { automatic, patient, image };  // automatic: patient where ids exist, else image

// "patient", "image" or "auto"; anything else: one line naming `flag` and the accepted values.
BootstrapUnit parse_bootstrap_unit(std::string_view text, const std::string& flag);

// Sets options.cluster_of_row and options.unit for rows whose patients are `patients` ("" = not known: that image
// is its own cluster). Patients are numbered in order of first appearance. BootstrapUnit::patient on rows without
// any patient id throws one line naming `data` (the dataset or file).
void set_bootstrap_unit(BootstrapOptions& options, BootstrapUnit unit, const std::vector<std::string>& patients,
                        const std::string& data);

// True when at least one row has a patient id.
bool has_patient_ids(const std::vector<std::string>& patients);

}  // namespace vitpipe
