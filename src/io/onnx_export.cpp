#include "io/onnx_export.h"

#include <onnx/checker.h>
#include <onnx/onnx-ml.pb.h>
#include <onnx/shape_inference/implementation.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <utility>
#include <variant>
#include <vector>

#include "model/model_family.h"
#include "model/position_interpolation.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"

namespace vitpipe {
namespace {

constexpr int64_t kOpset = 17;                 // LayerNormalization
constexpr size_t kProtobufLimit = 1ull << 31;  // one serialized message

// The graph under construction: initializers, nodes with fresh output names.
class GraphBuilder {
 public:
  explicit GraphBuilder(onnx::GraphProto& graph) : graph_(graph) {}

  std::string floats(const std::string& name, const std::vector<float>& values, const std::vector<int64_t>& dims) {
    onnx::TensorProto* t = graph_.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(values.data(), values.size() * sizeof(float));
    return name;
  }
  std::string tensor(const std::string& name, const Tensor& value) {
    const Tensor f = value.to(DType::f32);
    return floats(name, std::vector<float>(f.f32(), f.f32() + f.numel()),
                  std::vector<int64_t>(f.shape().begin(), f.shape().end()));
  }
  // weight [out, in] stored transposed, [in, out], for MatMul(x, W^T).
  std::string transposed(const std::string& name, const Tensor& weight) {
    const Tensor w = weight.to(DType::f32);
    const int64_t out = w.dim(0), in = w.dim(1);
    std::vector<float> t(static_cast<size_t>(out * in));
    for (int64_t i = 0; i < out; ++i)
      for (int64_t j = 0; j < in; ++j) t[static_cast<size_t>(j * out + i)] = w.f32()[i * in + j];
    return floats(name + ".T", t, {in, out});
  }
  std::string ints(const std::string& name, const std::vector<int64_t>& values) {
    onnx::TensorProto* t = graph_.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
    return name;
  }
  std::string scalar(const std::string& name, float value) { return floats(name, {value}, {}); }

  std::string op(const std::string& type, const std::vector<std::string>& inputs,
                 const std::function<void(onnx::NodeProto&)>& attributes = {}, const std::string& output = "") {
    onnx::NodeProto* n = graph_.add_node();
    n->set_op_type(type);
    n->set_name(concat(type, "_", ++count_));
    for (const auto& i : inputs) n->add_input(i);
    const std::string out = output.empty() ? concat(type, "_", count_, "_out") : output;
    n->add_output(out);
    if (attributes) attributes(*n);
    return out;
  }

 private:
  onnx::GraphProto& graph_;
  int count_ = 0;
};

void attr_int(onnx::NodeProto& n, const char* name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void attr_ints(onnx::NodeProto& n, const char* name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void attr_float(onnx::NodeProto& n, const char* name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

// The ViT family's forward pass, written out as ONNX nodes.
class VitGraph {
 public:
  VitGraph(const LoadedModel& model, GraphBuilder& g) : m_(model), c_(model.config), g_(g) {}

  std::string build(const std::string& pixels) {
    std::string x = embeddings(pixels);
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) x = block(x, l);
    const std::string prefix = model_prefix(c_);
    x = layer_norm(x, prefix + "layernorm", c_.layer_norm_eps);
    return head(x);
  }

 private:
  Tensor param(const std::string& name) const { return m_.parameters.tensor(name); }

  std::string linear(const std::string& x, const std::string& module, bool bias = true) {
    std::string y = g_.op("MatMul", {x, g_.transposed(module + ".weight", param(module + ".weight"))});
    if (bias) y = g_.op("Add", {y, g_.tensor(module + ".bias", param(module + ".bias"))});
    return y;
  }
  std::string layer_norm(const std::string& x, const std::string& module, double eps) {
    return g_.op("LayerNormalization",
                 {x, g_.tensor(module + ".weight", param(module + ".weight")),
                  g_.tensor(module + ".bias", param(module + ".bias"))},
                 [&](onnx::NodeProto& n) {
                   attr_int(n, "axis", -1);
                   attr_float(n, "epsilon", static_cast<float>(eps));
                 });
  }
  // The exact GELU: 0.5 x (1 + erf(x / sqrt 2)).
  std::string gelu(const std::string& x) {
    const std::string e = g_.op("Erf", {g_.op("Div", {x, g_.scalar(fresh("sqrt2"), std::sqrt(2.0f))})});
    return g_.op("Mul",
                 {g_.op("Mul", {x, g_.op("Add", {e, g_.scalar(fresh("one"), 1.0f)})}), g_.scalar(fresh("half"), 0.5f)});
  }
  std::string fresh(const std::string& stem) { return concat(stem, "_", ++constants_); }

  // [N, C, S, S] -> [N, T, D]: Conv patches, then [prefix tokens (+ positions) | patches + positions].
  std::string embeddings(const std::string& pixels) {
    const std::string e = model_prefix(c_) + "embeddings.";
    const int64_t d = c_.hidden_size, p = c_.patch_size, np = c_.num_patches();
    std::string x = g_.op(
        "Conv",
        {pixels, g_.tensor(e + "patch_embeddings.projection.weight", param(e + "patch_embeddings.projection.weight")),
         g_.tensor(e + "patch_embeddings.projection.bias", param(e + "patch_embeddings.projection.bias"))},
        [&](onnx::NodeProto& n) {
          attr_ints(n, "kernel_shape", {p, p});
          attr_ints(n, "strides", {p, p});
        });
    x = g_.op("Reshape", {x, g_.ints("shape_patches", {0, d, np})});
    x = g_.op("Transpose", {x}, [](onnx::NodeProto& n) { attr_ints(n, "perm", {0, 2, 1}); });

    // Positions at the input grid: as loaded (ViT, DeiT resize at load), or resampled once here (DINOv2).
    const Tensor pos = param(e + "position_embeddings");
    const int64_t kept = c_.positioned_prefix();
    std::vector<float> positions(static_cast<size_t>((kept + np) * d));
    const float* src = pos.f32();
    std::copy(src, src + kept * d, positions.begin());
    if (!c_.resamples_positions()) {
      std::copy(src + kept * d, src + (kept + np) * d, positions.begin() + kept * d);
    } else {
      const bool aa = c_.position_interpolation == PositionInterpolation::bicubic_antialias;
      const int64_t from = c_.position_grid(), to = c_.grid();
      const std::vector<double> w = bicubic_weight_matrix(from, to, aa);
      for (int64_t y = 0; y < to; ++y)
        for (int64_t xo = 0; xo < to; ++xo)
          for (int64_t k = 0; k < d; ++k) {
            double sum = 0;
            for (int64_t i = 0; i < from; ++i)
              for (int64_t j = 0; j < from; ++j) {
                sum += w[static_cast<size_t>(y * from + i)] * w[static_cast<size_t>(xo * from + j)] *
                       src[(kept + i * from + j) * d + k];
              }
            positions[static_cast<size_t>((kept + y * to + xo) * d + k)] = static_cast<float>(sum);
          }
    }
    x = g_.op("Add", {x, g_.floats("patch_positions", std::vector<float>(positions.begin() + kept * d, positions.end()),
                                   {1, np, d})});

    // Prefix tokens: CLS (+ distillation) with their positions, then registers without.
    std::vector<float> prefix;
    auto append = [&](const Tensor& t, const float* add) {
      for (int64_t i = 0; i < t.numel(); ++i) prefix.push_back(t.f32()[i] + (add ? add[i] : 0.0f));
    };
    append(param(e + "cls_token"), positions.data());
    if (c_.distillation_token) append(param(e + "distillation_token"), positions.data() + d);
    if (c_.num_register_tokens > 0) append(param(e + "register_tokens"), nullptr);
    const int64_t count = c_.prefix_tokens();
    const std::string batch = g_.op("Shape", {pixels}, [](onnx::NodeProto& n) {
      attr_int(n, "start", 0);
      attr_int(n, "end", 1);
    });
    const std::string shape = g_.op("Concat", {batch, g_.ints("prefix_dims", {count, d})},
                                    [](onnx::NodeProto& n) { attr_int(n, "axis", 0); });
    const std::string tokens = g_.op("Expand", {g_.floats("prefix_tokens", prefix, {1, count, d}), shape});
    return g_.op("Concat", {tokens, x}, [](onnx::NodeProto& n) { attr_int(n, "axis", 1); });
  }

  std::string attention(const std::string& x, int64_t l) {
    const int64_t t = c_.tokens(), h = c_.num_attention_heads, hd = c_.head_dim(), d = c_.hidden_size;
    const std::string heads = g_.ints(concat("heads_shape_", l), {0, t, h, hd});
    auto split = [&](LinearSite site, std::vector<int64_t> perm) {
      const std::string y = g_.op("Reshape", {linear(x, linear_module(c_, l, site), c_.qkv_bias), heads});
      return g_.op("Transpose", {y}, [&](onnx::NodeProto& n) { attr_ints(n, "perm", perm); });
    };
    const std::string q = split(LinearSite::query, {0, 2, 1, 3});  // [N, H, T, hd]
    const std::string k = split(LinearSite::key, {0, 2, 3, 1});    // [N, H, hd, T]
    const std::string v = split(LinearSite::value, {0, 2, 1, 3});
    std::string s =
        g_.op("Mul", {g_.op("MatMul", {q, k}), g_.scalar(fresh("scale"), 1.0f / std::sqrt(static_cast<float>(hd)))});
    s = g_.op("Softmax", {s}, [](onnx::NodeProto& n) { attr_int(n, "axis", -1); });
    std::string o = g_.op("MatMul", {s, v});
    o = g_.op("Transpose", {o}, [](onnx::NodeProto& n) { attr_ints(n, "perm", {0, 2, 1, 3}); });
    o = g_.op("Reshape", {o, g_.ints(concat("tokens_shape_", l), {0, t, d})});
    return linear(o, linear_module(c_, l, LinearSite::projection));
  }

  std::string mlp(const std::string& x, int64_t l) {
    std::string y = linear(x, linear_module(c_, l, LinearSite::fc1));
    if (c_.swiglu) {  // Dinov2SwiGLUFFN: x1, x2 = chunk(2); silu(x1) * x2
      const int64_t half = c_.intermediate_size;
      onnx::NodeProto* n = nullptr;
      const std::string x1 =
          g_.op("Split", {y, g_.ints(concat("swiglu_split_", l), {half, half})}, [&](onnx::NodeProto& node) {
            attr_int(node, "axis", -1);
            n = &node;
          });
      const std::string x2 = concat(x1, "_second");
      n->add_output(x2);
      y = g_.op("Mul", {g_.op("Mul", {x1, g_.op("Sigmoid", {x1})}), x2});
    } else {
      y = gelu(y);
    }
    return linear(y, linear_module(c_, l, LinearSite::fc2));
  }

  std::string residual(const std::string& x, const std::string& branch, int64_t l, int which) {
    std::string b = branch;
    if (c_.layer_scale) {
      const std::string name = layer_scale_module(c_, l, which) + ".lambda1";
      b = g_.op("Mul", {b, g_.tensor(name, param(name))});
    }
    return g_.op("Add", {x, b});
  }

  std::string block(const std::string& x, int64_t l) {
    const std::string a = attention(layer_norm(x, norm1_module(c_, l), c_.layer_norm_eps), l);
    const std::string mid = residual(x, a, l, 1);
    return residual(mid, mlp(layer_norm(mid, norm2_module(c_, l), c_.layer_norm_eps), l), l, 2);
  }

  std::string token(const std::string& x, int64_t index) {
    return g_.op("Gather", {x, g_.ints(concat("token_", index, "_", ++constants_), {index})},
                 [](onnx::NodeProto& n) { attr_int(n, "axis", 1); });
  }

  std::string head(const std::string& x) {
    const int64_t d = c_.hidden_size;
    auto flat = [&](const std::string& t) { return g_.op("Reshape", {t, g_.ints(fresh("row_shape"), {0, d})}); };
    switch (c_.head) {
      case HeadKind::cls_token:
        return g_.op("Identity", {linear(flat(token(x, 0)), "classifier")}, {}, "logits");
      case HeadKind::cls_and_distillation: {
        const std::string sum = g_.op(
            "Add", {linear(flat(token(x, 0)), "cls_classifier"), linear(flat(token(x, 1)), "distillation_classifier")});
        return g_.op("Mul", {sum, g_.scalar("half_head", 0.5f)}, {}, "logits");
      }
      case HeadKind::cls_and_patch_mean: {
        const std::string patches = g_.op("Slice", {x, g_.ints("patch_start", {c_.prefix_tokens()}),
                                                    g_.ints("patch_end", {c_.tokens()}), g_.ints("patch_axis", {1})});
        const std::string mean = g_.op("ReduceMean", {patches}, [](onnx::NodeProto& n) {
          attr_ints(n, "axes", {1});
          attr_int(n, "keepdims", 0);
        });
        const std::string features =
            g_.op("Concat", {flat(token(x, 0)), mean}, [](onnx::NodeProto& n) { attr_int(n, "axis", 1); });
        return g_.op("Identity", {linear(features, "classifier")}, {}, "logits");
      }
    }
    fail("internal: unknown head");
  }

  const LoadedModel& m_;
  const ViTConfig& c_;
  GraphBuilder& g_;
  int constants_ = 0;
};

void tensor_type(onnx::ValueInfoProto& v, const std::vector<std::variant<int64_t, std::string>>& dims) {
  auto* t = v.mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  for (const auto& d : dims) {
    auto* dim = t->mutable_shape()->add_dim();
    if (std::holds_alternative<int64_t>(d)) {
      dim->set_dim_value(std::get<int64_t>(d));
    } else {
      dim->set_dim_param(std::get<std::string>(d));
    }
  }
}

void metadata(onnx::ModelProto& m, const std::string& key, const std::string& value) {
  auto* p = m.add_metadata_props();
  p->set_key(key);
  p->set_value(value);
}

}  // namespace

void export_onnx(const LoadedModel& model, const std::filesystem::path& out, const OnnxExportOptions& options) {
  const ViTConfig& c = model.config;
  VP_REQUIRE(c.num_labels() > 0, options.source,
             ": the model has no classifier labels (an ONNX export needs its head)");
  VP_REQUIRE(c.hidden_act == "gelu" || c.swiglu, options.source, ": hidden_act \"", c.hidden_act,
             "\" has no ONNX export (exact GELU and SwiGLU do)");
  onnx::ModelProto m;
  m.set_ir_version(8);  // what opset 17 came with (ONNX 1.12)
  m.set_producer_name("vitpipe");
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  onnx::GraphProto& graph = *m.mutable_graph();
  graph.set_name(classification_architecture(c));
  tensor_type(*graph.add_input(), {std::string("batch"), c.num_channels, c.input_size(), c.input_size()});
  graph.mutable_input(0)->set_name("pixel_values");
  GraphBuilder builder(graph);
  VitGraph(model, builder).build("pixel_values");
  tensor_type(*graph.add_output(), {std::string("batch"), c.num_labels()});
  graph.mutable_output(0)->set_name("logits");

  nlohmann::ordered_json id2label = nlohmann::ordered_json::object();
  for (size_t i = 0; i < c.labels.size(); ++i) id2label[std::to_string(i)] = c.labels[i];
  metadata(m, "id2label", id2label.dump());
  metadata(m, "problem_type", problem_type_name(c.problem_type));
  metadata(m, "preprocessor_config", preprocessor_config_text(model.preprocessor));
  metadata(m, "model_type", c.model_type);
  metadata(m, "architecture", classification_architecture(c));
  metadata(m, "source", options.source);

  try {
    onnx::checker::check_model(m);
    onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(true, 1, false));
  } catch (const std::exception& e) {
    fail("internal: the ONNX graph for ", options.source, " fails ONNX's checks: ", e.what());
  }

  // Past protobuf's limit (or when asked) the weights go to "<out>.data", each at an offset the model records.
  const bool external = options.external_data || m.ByteSizeLong() >= kProtobufLimit - (64ull << 20);
  const std::filesystem::path data_path = out.string() + ".data";
  if (external) {
    AtomicFileWriter data(data_path);
    for (onnx::TensorProto& t : *graph.mutable_initializer()) {
      if (t.data_type() != onnx::TensorProto::FLOAT || t.raw_data().size() < 1024) continue;
      const size_t offset = data.bytes_written();
      data.write(t.raw_data().data(), t.raw_data().size());
      const size_t length = t.raw_data().size();
      t.clear_raw_data();
      t.set_data_location(onnx::TensorProto::EXTERNAL);
      for (const auto& [key, value] : {std::pair<std::string, std::string>{"location", data_path.filename().string()},
                                       {"offset", std::to_string(offset)},
                                       {"length", std::to_string(length)}}) {
        auto* entry = t.add_external_data();
        entry->set_key(key);
        entry->set_value(value);
      }
    }
    data.commit();
  }
  std::string bytes;
  VP_REQUIRE(m.SerializeToString(&bytes), "cannot serialise the ONNX model for ", out.string(),
             " (past protobuf's 2 GiB limit even with external weights)");
  AtomicFileWriter file(out);
  file.write(bytes.data(), bytes.size());
  file.commit();
  info("wrote ", out.string(), " (", bytes.size() >> 20, " MiB",
       external ? concat(", weights in ", data_path.string()) : "", "; opset ", kOpset, ", pixel_values [batch, ",
       c.num_channels, ", ", c.input_size(), ", ", c.input_size(), "] -> logits [batch, ", c.num_labels(), "])");
}

}  // namespace vitpipe
