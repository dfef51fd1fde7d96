// `vitpipe image convert IN OUT.png [--intensity ...] [--dicom-window ...]`: writes the 8-bit image vitpipe feeds to
// the image processor for IN (before resizing and normalising): what a model sees of a DICOM file or a 16-bit PNG.
#include <memory>

#include "cli/commands.h"
#include "cli/data_flags.h"
#include "data/image.h"
#include "data/png_encoder.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace vitpipe::cli {

void add_image_command(CLI::App& app) {
  auto* image = app.add_subcommand("image", "Look at images as vitpipe reads them");
  image->require_subcommand(1);
  struct Args {
    std::string in, out;
    ImageReadFlags read;
  };
  auto args = std::make_shared<Args>();
  auto* convert = image->add_subcommand(
      "convert",
      "Write the 8-bit image vitpipe feeds to the processor (gray or RGB PNG) for a PNG, JPEG or DICOM file");
  convert->add_option("input", args->in, "PNG, JPEG or DICOM file")->required();
  convert->add_option("output", args->out, "PNG file to write (written atomically; nothing on error)")->required();
  add_image_read_flags(convert, &args->read);
  convert->callback([args] {
    const DecodedImage decoded = decode_image_file_keep_gray(args->in, args->read.options);
    const std::vector<uint8_t> png = encode_png(decoded);
    AtomicFileWriter file(args->out);
    file.write(png.data(), png.size());
    file.commit();
  });
}

}  // namespace vitpipe::cli
