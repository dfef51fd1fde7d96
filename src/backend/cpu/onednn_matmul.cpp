#include "backend/cpu/onednn_matmul.h"

#include <omp.h>

#include <unordered_map>

#include "backend/cpu/bf16_widening.h"
#include "util/error.h"

namespace vitpipe::cpu {
namespace {

dnnl::memory::data_type to_dnnl(DType type) {
  switch (type) {
    case DType::f32:
      return dnnl::memory::data_type::f32;
    case DType::bf16:
      return dnnl::memory::data_type::bf16;
    case DType::f16:
      return dnnl::memory::data_type::f16;
    default:
      fail("matmul: unsupported dtype ", dtype_name(type));
  }
}

// Whether oneDNN has bf16 matmul kernels in this process (it needs AVX-512 and honours ONEDNN_MAX_CPU_ISA).
bool onednn_has_bf16_matmul(const dnnl::engine& engine) {
  static const bool available = [&] {
    using dims = dnnl::memory::dims;
    const dnnl::memory::desc a(dims{16, 16}, dnnl::memory::data_type::bf16, dims{16, 1});
    const dnnl::memory::desc c(dims{16, 16}, dnnl::memory::data_type::f32, dims{16, 1});
    try {
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, a, c), engine);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

// Grows `buffer` to at least `count` floats (aligned, reused across calls).
float* fp32_scratch(Tensor& buffer, int64_t count) {
  if (buffer.numel() < count) buffer = Tensor::empty({count});
  return buffer.f32();
}

float* fp32_scratch(std::vector<float>& buffer, int64_t count) {
  if (static_cast<int64_t>(buffer.size()) < count) buffer.resize(static_cast<size_t>(count));
  return buffer.data();
}

}  // namespace

MatmulCache::MatmulCache()
    : level_(selected_cpu_level()),
      engine_(dnnl::engine::kind::cpu, 0),
      stream_(engine_),
      bf16_kernels_(onednn_has_bf16_matmul(engine_)) {}

MatmulCache::~MatmulCache() = default;

std::shared_ptr<MatmulCache::Prepared> MatmulCache::create(const MatmulShape& shape, bool user_scratchpad) {
  const bool any_bf16 = shape.a_type == DType::bf16 || shape.b_type == DType::bf16 || shape.c_type == DType::bf16;
  try {
    return create_as(shape, user_scratchpad, any_bf16 && !bf16_kernels_);
  } catch (const dnnl::error& e) {
    // Even with bf16 kernels oneDNN lacks some mixes (oneDNN 2.6 on AVX-512-BF16: fp32 x fp32 -> bf16); those run
    // widened, which computes the same up to summation order.
    if (any_bf16 && bf16_kernels_) {
      try {
        return create_as(shape, user_scratchpad, true);
      } catch (const dnnl::error&) {
      }
    }
    fail("oneDNN cannot create a matmul for M=", shape.m, " N=", shape.n, " K=", shape.k, " (",
         dtype_name(shape.a_type), " x ", dtype_name(shape.b_type), " -> ", dtype_name(shape.c_type),
         ") on this CPU (oneDNN ISA ", onednn_isa_name(), "): ", e.what());
  }
}

std::shared_ptr<MatmulCache::Prepared> MatmulCache::create_as(const MatmulShape& shape, bool user_scratchpad,
                                                              bool widen) {
  using dims = dnnl::memory::dims;
  auto p = std::make_shared<Prepared>();
  if (widen) p->widening = std::make_unique<Bf16Widening>(plan_bf16_widening(shape));
  const MatmulShape& s = widen ? p->widening->f32_shape : shape;
  p->a_desc = dnnl::memory::desc(dims{s.m, s.k}, to_dnnl(s.a_type), dims{s.a_row, s.a_col});
  p->b_desc = dnnl::memory::desc(dims{s.k, s.n}, to_dnnl(s.b_type), dims{s.b_row, s.b_col});
  p->c_desc = dnnl::memory::desc(dims{s.m, s.n}, to_dnnl(s.c_type), dims{s.c_row, 1});
  dnnl::primitive_attr attr;
  dnnl::post_ops ops;
  if (s.residual) {
    // The residual is read where the caller keeps it (its own row stride), even when the result is widened.
    p->residual_desc = dnnl::memory::desc(dims{s.m, s.n}, dnnl::memory::data_type::f32, dims{shape.c_row, 1});
    ops.append_binary(dnnl::algorithm::binary_add, p->residual_desc);
  }
  if (s.accumulate) ops.append_sum(1.0f);
  // gelu_erf, not eltwise_gelu: that one is the tanh approximation, 4.7e-4 away from ViT's exact GELU.
  if (s.gelu) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
  attr.set_post_ops(ops);
  if (user_scratchpad) attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  p->has_bias = s.bias;
  // Packing B: oneDNN picks its layout (format any); pack_b() reorders each call's B into it.
  const bool pack_b = s.pack_b && !widen;
  const dnnl::memory::desc b_wanted =
      pack_b ? dnnl::memory::desc(dims{s.k, s.n}, to_dnnl(s.b_type), dnnl::memory::format_tag::any) : p->b_desc;
  if (s.bias) {
    p->bias_desc = dnnl::memory::desc(dims{1, s.n}, dnnl::memory::data_type::f32, dims{s.n, 1});
    p->pd =
        dnnl::matmul::primitive_desc(dnnl::matmul::desc(p->a_desc, b_wanted, p->bias_desc, p->c_desc), attr, engine_);
  } else {
    p->pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(p->a_desc, b_wanted, p->c_desc), attr, engine_);
  }
  p->primitive = dnnl::matmul(p->pd);
  if (pack_b && p->pd.weights_desc() != p->b_desc) {
    p->packs_b = true;
    p->packed_b_desc = p->pd.weights_desc();
    p->pack_b_reorder = dnnl::reorder(dnnl::reorder::primitive_desc(engine_, p->b_desc, engine_, p->packed_b_desc));
  }
  p->scratchpad_bytes = user_scratchpad ? p->pd.scratchpad_desc().get_size() : 0;
  return p;
}

void MatmulCache::run(const MatmulShape& shape, const void* a, const void* b, void* c, const float* bias,
                      const float* residual) {
  auto key = shape.key();
  auto it = cache_.find(key);
  if (it == cache_.end()) it = cache_.emplace(key, create(shape, false)).first;
  Prepared& p = *it->second;
  void* c_out = c;
  if (p.widening) {
    const Bf16Widening& w = *p.widening;
    if (w.a) {
      float* wide = fp32_scratch(wide_a_, w.a_elements());
      widen_bf16(static_cast<const uint16_t*>(a), w.a_view, wide, true);
      a = wide;
    }
    if (w.b) {
      float* wide = fp32_scratch(wide_b_, w.b_elements());
      widen_bf16(static_cast<const uint16_t*>(b), w.b_view, wide, true);
      b = wide;
    }
    if (w.c) c_out = fp32_scratch(wide_c_, w.c_elements());
  }
  std::unordered_map<int, dnnl::memory> args;
  args.emplace(DNNL_ARG_SRC, dnnl::memory(p.a_desc, engine_, const_cast<void*>(a)));
  args.emplace(DNNL_ARG_WEIGHTS, dnnl::memory(p.b_read_desc(), engine_, const_cast<void*>(pack_b(p, b))));
  args.emplace(DNNL_ARG_DST, dnnl::memory(p.c_desc, engine_, c_out));
  if (shape.bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p.bias_desc, engine_, const_cast<float*>(bias)));
  if (shape.residual) {
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                 dnnl::memory(p.residual_desc, engine_, const_cast<float*>(residual)));
  }
  p.primitive.execute(stream_, args);
  stream_.wait();
  if (p.widening && p.widening->c) {
    narrow_to_bf16(static_cast<const float*>(c_out), shape.m, shape.n, static_cast<uint16_t*>(c), shape.c_row, true);
  }
}

const MatmulCache::Prepared& MatmulCache::prepare(const MatmulShape& shape) {
  VP_REQUIRE(!shape.residual, "prepared matmuls take no residual");
  auto key = shape.key();
  auto it = thread_cache_.find(key);
  if (it == thread_cache_.end()) it = thread_cache_.emplace(key, create(shape, true)).first;
  const int threads = omp_get_max_threads();
  while (static_cast<int>(thread_streams_.size()) < threads) {
    thread_streams_.push_back(std::make_unique<dnnl::stream>(engine_));
  }
  Prepared& p = *it->second;
  if (static_cast<int>(p.thread_args.size()) < threads) {
    p.thread_args.resize(static_cast<size_t>(threads));
    for (auto& ta : p.thread_args) {
      ta.a = dnnl::memory(p.a_desc, engine_, DNNL_MEMORY_NONE);
      ta.b = dnnl::memory(p.b_read_desc(), engine_, DNNL_MEMORY_NONE);
      ta.c = dnnl::memory(p.c_desc, engine_, DNNL_MEMORY_NONE);
      ta.args = {{DNNL_ARG_SRC, ta.a}, {DNNL_ARG_WEIGHTS, ta.b}, {DNNL_ARG_DST, ta.c}};
      if (p.has_bias) {
        ta.bias = dnnl::memory(p.bias_desc, engine_, DNNL_MEMORY_NONE);
        ta.args.emplace(DNNL_ARG_BIAS, ta.bias);
      }
      if (p.scratchpad_bytes > 0) {
        ta.scratchpad.resize(p.scratchpad_bytes);
        ta.args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.pd.scratchpad_desc(), engine_, ta.scratchpad.data()));
      }
    }
  }
  return p;
}

const void* MatmulCache::pack_b(const Prepared& prepared, const void* b) {
  if (!prepared.packs_b) return b;
  auto& p = const_cast<Prepared&>(prepared);  // only its packed copy changes
  const auto floats = static_cast<int64_t>((p.packed_b_desc.get_size() + sizeof(float) - 1) / sizeof(float));
  dnnl::memory plain(p.b_desc, engine_, const_cast<void*>(b));
  dnnl::memory packed(p.packed_b_desc, engine_, fp32_scratch(p.packed_b, floats));
  p.pack_b_reorder.execute(stream_, plain, packed);
  stream_.wait();
  return p.packed_b.raw();
}

void MatmulCache::run_prepared(const Prepared& p, const void* a, const void* b, void* c, const float* bias) {
  const size_t thread = static_cast<size_t>(omp_get_thread_num());
  dnnl::stream& stream = *thread_streams_[thread];
  auto& ta = const_cast<Prepared::ThreadArgs&>(p.thread_args[thread]);  // this thread's alone
  void* c_out = c;
  if (p.widening) {
    const Bf16Widening& w = *p.widening;
    if (w.a) {
      float* wide = fp32_scratch(ta.wide_a, w.a_elements());
      widen_bf16(static_cast<const uint16_t*>(a), w.a_view, wide, false);
      a = wide;
    }
    if (w.b) {
      float* wide = fp32_scratch(ta.wide_b, w.b_elements());
      widen_bf16(static_cast<const uint16_t*>(b), w.b_view, wide, false);
      b = wide;
    }
    if (w.c) c_out = fp32_scratch(ta.wide_c, w.c_elements());
  }
  VP_REQUIRE(!p.packs_b || b == p.packed_b.raw(), "run_prepared: this matmul packs its B: pass pack_b()'s copy");
  ta.a.set_data_handle(const_cast<void*>(a));
  ta.b.set_data_handle(const_cast<void*>(b));
  ta.c.set_data_handle(c_out);
  if (p.has_bias) {
    VP_REQUIRE(bias != nullptr, "run_prepared: this matmul needs its bias");
    ta.bias.set_data_handle(const_cast<float*>(bias));
  }
  p.primitive.execute(stream, ta.args);
  stream.wait();
  if (p.widening && p.widening->c) {
    const MatmulShape& s = p.widening->f32_shape;
    narrow_to_bf16(static_cast<const float*>(c_out), s.m, s.n, static_cast<uint16_t*>(c), p.widening->c_row, false);
  }
}

}  // namespace vitpipe::cpu
