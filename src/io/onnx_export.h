// A loaded model as an ONNX file, as optimum names it: input `pixel_values` [batch, C, S, S] float32 (the batch axis
// dynamic), output `logits` [batch, labels]. Opset 17 standard operators only (Conv, MatMul, LayerNormalization,
// Softmax, Erf for the exact GELU), so ONNX Runtime, TensorRT and OpenVINO take the file. Position embeddings are
// the ones the model uses at S (resampled once here, nothing interpolates inside the graph). Labels (id2label), the
// preprocessor's settings and the model's source go in the metadata properties. Built with ONNX's own protobuf
// classes; the checker and strict shape inference run before anything is written; the file (and its external weight
// file) are written atomically.
#pragma once

#include <filesystem>
#include <string>

#include "io/model_files.h"

namespace vitpipe {

struct OnnxExportOptions {
  std::string source;          // recorded in the metadata ("source")
  bool external_data = false;  // weights in "<out>.data" beside the model; forced past protobuf's 2 GiB limit
};

void export_onnx(const LoadedModel& model, const std::filesystem::path& out, const OnnxExportOptions& options);

}  // namespace vitpipe
