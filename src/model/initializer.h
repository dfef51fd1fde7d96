// Fresh parameters the way transformers' ..._init_weights make them: Linear and Conv2d weights, position_embeddings
// and cls_token ~ trunc_normal(0, initializer_range) truncated to [-2, 2] (absolute bounds, as
// torch.nn.init.trunc_normal_'s defaults), biases 0, LayerNorm weight 1 and bias 0; DeiT's tokens and position
// embeddings 0, DINOv2's mask and register tokens 0 and LayerScale layerscale_value; LoRA as peft: A kaiming-uniform
// (a = sqrt(5), i.e. U(+-1/sqrt(in))), B 0.
// Every parameter draws from its own stream Rng({seed, hash(name)}): the values depend only on the seed and the
// name, not on thread count, segment range or the other parameters (a fresh classifier for the same seed is the
// same whether or not the rest of the model was initialised).
#pragma once

#include <cstdint>
#include <string_view>

#include "model/parameter_layout.h"
#include "util/random.h"

namespace vitpipe {

// One draw of N(0, std) truncated to [low, high] (resampled until inside).
double truncated_normal(Rng& rng, double stddev, double low = -2.0, double high = 2.0);

// The stream a parameter draws from.
uint64_t parameter_stream_seed(uint64_t seed, std::string_view name);

// Initialises every parameter `parameters` holds.
void initialize_parameters(FlatParameters& parameters, uint64_t seed);

// Initialises the classifier(s) only (a fresh head on a pre-trained backbone).
void initialize_classifier(FlatParameters& parameters, uint64_t seed);
// Initialises the LoRA matrices only.
void initialize_lora(FlatParameters& parameters, uint64_t seed);

}  // namespace vitpipe
