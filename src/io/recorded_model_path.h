// How run files (train_options.json, a checkpoint's base_model, an adapter's base_model_name_or_path) name a model:
// a local directory by its absolute path, so the file means the same model from any working directory; a Hugging
// Face Hub repo id as given. A recorded local base that has since moved is refused with one line naming it, instead
// of being taken for a Hub id and downloaded.
#pragma once

#include <string>

namespace vitpipe {

// `reference` (a --model value) as a run file should record it: an existing directory as its absolute, normalised
// path ("~/" expanded); anything else (a Hub repo id) unchanged.
std::string recorded_model_reference(const std::string& reference);

// Throws vitpipe::Error "<recorded_in>: its base model <base> is no longer there (moved or deleted?); <remedy>" when
// `base` is an absolute path that is not a directory. Relative paths and repo ids pass (resolved as usual).
void require_recorded_base(const std::string& base, const std::string& recorded_in, const std::string& remedy);

}  // namespace vitpipe
