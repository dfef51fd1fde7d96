// Training checkpoints (`--resume`, `vitpipe export`): trainer_state.json, optimizer.safetensors and the
// checkpoints/latest pointer, around a valid tiny model directory. The input holds up to three parts separated by
// "\n--8<--\n": trainer_state.json, optimizer.safetensors (absent when there is no second part), latest.
#include "fuzz_common.h"
#include "io/model_files.h"
#include "io/preprocessor_config.h"
#include "train/training_checkpoint.h"

namespace {

namespace fs = std::filesystem;

// output/checkpoints/step-00000001/ holding a 1-layer ViT of 8 x 8 pixels: the part the fuzzer does not touch.
fs::path make_checkpoint_directory() {
  const fs::path output = vitpipe::fuzz::scratch_directory() / "output";
  const fs::path step = output / "checkpoints" / "step-00000001";
  vitpipe::ViTConfig config;
  config.hidden_size = 8;
  config.num_hidden_layers = 1;
  config.num_attention_heads = 2;
  config.intermediate_size = 16;
  config.image_size = 8;
  config.patch_size = 4;
  config.labels = {"a", "b"};
  auto layout = std::make_shared<const vitpipe::ParameterLayout>(config);
  vitpipe::save_model(step, config, vitpipe::default_preprocessor_config(8),
                      vitpipe::FlatParameters::whole_model(layout));
  return output;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fs::path output = make_checkpoint_directory();
  const fs::path step = output / "checkpoints" / "step-00000001";
  const auto parts = vitpipe::fuzz::split_parts(vitpipe::fuzz::as_text(data, size), 3);
  vitpipe::fuzz::write_file(step / "trainer_state.json", parts[0]);
  std::error_code ignored;
  fs::remove(step / "optimizer.safetensors", ignored);
  if (parts.size() > 1) vitpipe::fuzz::write_file(step / "optimizer.safetensors", parts[1]);
  vitpipe::fuzz::write_file(output / "checkpoints" / "latest", parts.size() > 2 ? parts[2] : "step-00000001\n");
  vitpipe::fuzz::expect_parse_or_refusal([&] {
    const auto latest = vitpipe::latest_checkpoint(output);
    const vitpipe::TrainingCheckpoint checkpoint = vitpipe::read_training_checkpoint(latest ? *latest : step);
    // Optimizer buffers cover the trainable parameters: never more elements than the checkpoint's parameters.
    int64_t parameters = checkpoint.model.numel();
    for (const auto& [name, tensor] : checkpoint.trainable) parameters += tensor.numel();
    for (const auto& [name, tensor] : checkpoint.optimizer_state)
      if (tensor.numel() > parameters) std::abort();
  });
  return 0;
}
