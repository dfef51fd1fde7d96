// Test driver for resolve_model_reference (what every `--model` goes through):
//   hub_resolve_model REFERENCE [--revision R] [--no-download]  -> prints the model directory
#include <cstdio>
#include <cstring>

#include "io/model_reference.h"
#include "util/error.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s REFERENCE [--revision R] [--no-download]\n", argv[0]);
    return 2;
  }
  vitpipe::ModelReferenceOptions options;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--revision") == 0 && i + 1 < argc) {
      options.revision = argv[++i];
    } else if (std::strcmp(argv[i], "--no-download") == 0) {
      options.allow_download = false;
    }
  }
  try {
    std::printf("%s\n", vitpipe::resolve_model_reference(argv[1], options).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
