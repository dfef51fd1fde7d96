#include "seam_backend.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <new>
#include <set>
#include <utility>
#include <vector>

namespace vitpipe {
namespace {

// Fixed arrays: the SIGSEGV handler reads and writes them and must not allocate.
constexpr int kMaxRegions = 1 << 16;
constexpr int kMaxTouches = 32;
constexpr int kFrames = 24;

struct Region {
  uintptr_t begin = 0, end = 0;
  const char* call = "";  // the backend call that first handed the tensor over, and which of its tensors it was
  int argument = 0;
};
struct Touch {
  uintptr_t address = 0;
  int region = 0;
  int frames = 0;
  void* stack[kFrames] = {};
};

Region g_regions[kMaxRegions];
int g_region_count = 0;
Touch g_touches[kMaxTouches];
volatile sig_atomic_t g_touch_count = 0;
bool g_released = false;
bool g_state_only = false;  // SeamWatch::training_state
bool g_installed = false;
int64_t g_watched_bytes = 0, g_handed_bytes = 0;
std::set<std::pair<uintptr_t, uintptr_t>> g_known_regions, g_known_tensors;
std::vector<Tensor> g_kept;  // a closed page must not be freed and handed to someone else
std::mutex g_mutex;          // stages may call from several threads
struct sigaction g_previous;

void set_all(int protection) {
  for (int i = 0; i < g_region_count; ++i) {
    ::mprotect(reinterpret_cast<void*>(g_regions[i].begin), g_regions[i].end - g_regions[i].begin, protection);
  }
}

void on_segv(int signal, siginfo_t* info, void* context) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (int i = 0; i < g_region_count; ++i) {
    if (address >= g_regions[i].begin && address < g_regions[i].end) {
      const int n = g_touch_count;
      if (n < kMaxTouches) {
        g_touches[n].address = address;
        g_touches[n].region = i;
        g_touches[n].frames = ::backtrace(g_touches[n].stack, kFrames);
      }
      g_touch_count = n + 1;
      set_all(PROT_READ | PROT_WRITE);  // the access is retried on return, and succeeds
      return;
    }
  }
  // Not a watched page: a real crash, for the previous handler (or the default) to report.
  ::sigaction(SIGSEGV, &g_previous, nullptr);
  (void)signal, (void)context;
}

void install() {
  if (g_installed) return;
  void* warm[2];
  ::backtrace(warm, 2);  // loads libgcc's unwinder now: it allocates, which a signal handler must not
  struct sigaction action {};
  action.sa_sigaction = on_segv;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGSEGV, &action, &g_previous);
  g_installed = true;
}

// `span`: the bytes the watch may close (whole pages inside them): the tensor's own by default, or the mapping an
// allocate() made for it (which covers a small tensor's page too).
void watch(const Tensor& t, const char* call, int argument, size_t span = 0) {
  const uintptr_t data = reinterpret_cast<uintptr_t>(t.raw()), page = static_cast<uintptr_t>(::getpagesize());
  if (g_known_tensors.insert({data, t.nbytes()}).second) g_handed_bytes += static_cast<int64_t>(t.nbytes());
  const uintptr_t begin = (data + page - 1) / page * page, end = (data + std::max(span, t.nbytes())) / page * page;
  if (end <= begin || !g_known_regions.insert({begin, end}).second || g_region_count == kMaxRegions) return;
  g_regions[g_region_count++] = {begin, end, call, argument};
  g_watched_bytes += static_cast<int64_t>(end - begin);
  g_kept.push_back(t);
}

// One backend call: the watched pages open for its length; the tensors it was handed are watched from its end on.
class Call {
 public:
  // `state`: the call's tensors are training state (watched in either mode).
  Call(const char* call, std::initializer_list<const Tensor*> tensors, bool state = false)
      : lock_(g_mutex), call_(call) {
    if (g_released) return;
    set_all(PROT_READ | PROT_WRITE);
    if (g_state_only && !state) return;
    int argument = 0;
    for (const Tensor* t : tensors) {
      ++argument;
      if (t != nullptr && t->defined() && t->nbytes() > 0) handed_.push_back({t, argument});
    }
  }
  ~Call() {
    if (g_released) return;
    for (const auto& [t, argument] : handed_) watch(*t, call_, argument);
    set_all(PROT_NONE);
  }

 private:
  std::lock_guard<std::mutex> lock_;
  const char* call_;
  std::vector<std::pair<const Tensor*, int>> handed_;
};

class SeamBackendImpl final : public Backend {
 public:
  explicit SeamBackendImpl(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) { install(); }
  std::string name() const override { return "seam(" + inner_->name() + ")"; }

  // Device memory as a GPU backend gives it: whole pages of their own (so every byte can be closed), never the
  // host's to touch. In `all` mode the pages close at once, before any op has written them: a host write of a
  // freshly allocated tensor is a touch too.
  Tensor allocate(const Shape& shape, DType dtype) override {
    const size_t page = static_cast<size_t>(::getpagesize());
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
    const size_t length = std::max(page, (bytes + page - 1) / page * page);
    void* memory = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
    auto owner = std::shared_ptr<void>(memory, [length](void* p) { ::munmap(p, length); });
    Tensor t = Tensor::wrap(memory, shape, dtype, owner);
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_released && !g_state_only && t.nbytes() > 0) {
      watch(t, "allocate", 0, length);
      set_all(PROT_NONE);
    }
    return t;
  }
  bool host_accessible() const override { return false; }

  void linear_forward(const Tensor& in, const Tensor& weight, const Tensor* bias, const Tensor* residual,
                      const Tensor& out) override {
    Call c(__func__, {&in, &weight, bias, residual, &out});
    inner_->linear_forward(in, weight, bias, residual, out);
  }
  void linear_gelu_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor* pre_activation,
                           const Tensor& out) override {
    Call c(__func__, {&in, &weight, &bias, pre_activation, &out});
    inner_->linear_gelu_forward(in, weight, bias, pre_activation, out);
  }
  void linear_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_in) override {
    Call c(__func__, {&grad_out, &weight, &grad_in});
    inner_->linear_backward_input(grad_out, weight, grad_in);
  }
  void linear_backward_weight(const Tensor& grad_out, const Tensor& in, const Tensor& grad_weight) override {
    Call c(__func__, {&grad_out, &in, &grad_weight});
    inner_->linear_backward_weight(grad_out, in, grad_weight);
  }
  void bias_backward(const Tensor& grad, const Tensor& grad_bias) override {
    Call c(__func__, {&grad, &grad_bias});
    inner_->bias_backward(grad, grad_bias);
  }
  void layernorm_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                         const Tensor& mean, const Tensor& rstd) override {
    Call c(__func__, {&in, &weight, &bias, &out, &mean, &rstd});
    inner_->layernorm_forward(in, weight, bias, eps, out, mean, rstd);
  }
  void layernorm_backward(const LayerNormBackwardArgs& a) override {
    Call c(__func__, {&a.grad_out, &a.in, &a.weight, &a.mean, &a.rstd, &a.grad_in, &a.grad_residual, &a.grad_weight,
                      &a.grad_bias, &a.grad_in_copy, &a.grad_in_colsum});
    inner_->layernorm_backward(a);
  }
  void attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) override {
    Call c(__func__, {&qkv, &lse, &out});
    inner_->attention_forward(qkv, heads, lse, out);
  }
  void attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                          int64_t heads, const Tensor& grad_qkv, const Tensor* grad_qkv_bias) override {
    Call c(__func__, {&grad_out, &qkv, &out, &lse, &grad_qkv, grad_qkv_bias});
    inner_->attention_backward(grad_out, qkv, out, lse, heads, grad_qkv, grad_qkv_bias);
  }
  void cls_attention_forward(const Tensor& qkv, int64_t heads, const Tensor& lse, const Tensor& out) override {
    Call c(__func__, {&qkv, &lse, &out});
    inner_->cls_attention_forward(qkv, heads, lse, out);
  }
  void cls_attention_backward(const Tensor& grad_out, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              int64_t heads, const Tensor& grad_qkv, const Tensor* grad_qkv_bias) override {
    Call c(__func__, {&grad_out, &qkv, &out, &lse, &grad_qkv, grad_qkv_bias});
    inner_->cls_attention_backward(grad_out, qkv, out, lse, heads, grad_qkv, grad_qkv_bias);
  }
  void gelu_forward(const Tensor& in, const Tensor& out) override {
    Call c(__func__, {&in, &out});
    inner_->gelu_forward(in, out);
  }
  void gelu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in,
                     const Tensor* grad_bias) override {
    Call c(__func__, {&grad_out, &in, &grad_in, grad_bias});
    inner_->gelu_backward(grad_out, in, grad_in, grad_bias);
  }
  void patchify(const Tensor& images, int64_t patch, const Tensor& patches) override {
    Call c(__func__, {&images, &patches});
    inner_->patchify(images, patch, patches);
  }
  void embeddings_forward(const Tensor& patch_proj, const Tensor& cls, const Tensor& pos, const Tensor& x) override {
    Call c(__func__, {&patch_proj, &cls, &pos, &x});
    inner_->embeddings_forward(patch_proj, cls, pos, x);
  }
  void embeddings_backward(const Tensor& grad_x, const Tensor& grad_cls, const Tensor& grad_pos,
                           const Tensor& grad_patch_proj, const Tensor* grad_patch_bias) override {
    Call c(__func__, {&grad_x, &grad_cls, &grad_pos, &grad_patch_proj, grad_patch_bias});
    inner_->embeddings_backward(grad_x, grad_cls, grad_pos, grad_patch_proj, grad_patch_bias);
  }
  void gather_cls(const Tensor& x, const Tensor& out) override {
    Call c(__func__, {&x, &out});
    inner_->gather_cls(x, out);
  }
  void scatter_cls(const Tensor& grad, const Tensor& grad_x) override {
    Call c(__func__, {&grad, &grad_x});
    inner_->scatter_cls(grad, grad_x);
  }
  double bce_with_logits(const Tensor& logits, const Tensor& targets, const Tensor* pos_weight, const Tensor* weight,
                         double grad_scale, const Tensor& grad_logits) override {
    Call c(__func__, {&logits, &targets, pos_weight, weight, &grad_logits});
    return inner_->bce_with_logits(logits, targets, pos_weight, weight, grad_scale, grad_logits);
  }
  double cross_entropy(const Tensor& logits, const Tensor& targets, double grad_scale,
                       const Tensor& grad_logits) override {
    Call c(__func__, {&logits, &targets, &grad_logits});
    return inner_->cross_entropy(logits, targets, grad_scale, grad_logits);
  }
  void convert(const Tensor& src, const Tensor& dst) override {
    Call c(__func__, {&src, &dst});
    inner_->convert(src, dst);
  }
  void scale(const Tensor& in, double factor, const Tensor& out) override {
    Call c(__func__, {&in, &out});
    inner_->scale(in, factor, out);
  }
  void token_embeddings_forward(const Tensor& patch_proj, const Tensor& prefix, int64_t positioned, const Tensor& pos,
                                const Tensor& x) override {
    Call c(__func__, {&patch_proj, &prefix, &pos, &x});
    inner_->token_embeddings_forward(patch_proj, prefix, positioned, pos, x);
  }
  void token_embeddings_backward(const Tensor& grad_x, const Tensor* grad_prefix, int64_t positioned,
                                 const Tensor* grad_pos, const Tensor& grad_patch_proj,
                                 const Tensor* grad_patch_bias) override {
    Call c(__func__, {&grad_x, grad_prefix, grad_pos, &grad_patch_proj, grad_patch_bias});
    inner_->token_embeddings_backward(grad_x, grad_prefix, positioned, grad_pos, grad_patch_proj, grad_patch_bias);
  }
  void resample_positions_forward(const Tensor& pos, int64_t kept, const Tensor& wy, const Tensor& wx,
                                  const Tensor& out) override {
    Call c(__func__, {&pos, &wy, &wx, &out});
    inner_->resample_positions_forward(pos, kept, wy, wx, out);
  }
  void resample_positions_backward(const Tensor& grad_out, int64_t kept, const Tensor& wy, const Tensor& wx,
                                   const Tensor& grad_pos) override {
    Call c(__func__, {&grad_out, &wy, &wx, &grad_pos});
    inner_->resample_positions_backward(grad_out, kept, wy, wx, grad_pos);
  }
  void layer_scale_forward(const Tensor& branch, const Tensor& scale, const Tensor& residual,
                           const Tensor& out) override {
    Call c(__func__, {&branch, &scale, &residual, &out});
    inner_->layer_scale_forward(branch, scale, residual, out);
  }
  void layer_scale_backward(const Tensor& grad, const Tensor& branch, const Tensor& scale, const Tensor& branch_grad,
                            const Tensor* grad_scale, const Tensor* grad_bias) override {
    Call c(__func__, {&grad, &branch, &scale, &branch_grad, grad_scale, grad_bias});
    inner_->layer_scale_backward(grad, branch, scale, branch_grad, grad_scale, grad_bias);
  }
  void swiglu_forward(const Tensor& in, const Tensor& out) override {
    Call c(__func__, {&in, &out});
    inner_->swiglu_forward(in, out);
  }
  void swiglu_backward(const Tensor& grad_out, const Tensor& in, const Tensor& grad_in,
                       const Tensor* grad_bias) override {
    Call c(__func__, {&grad_out, &in, &grad_in, grad_bias});
    inner_->swiglu_backward(grad_out, in, grad_in, grad_bias);
  }
  void gather_tokens(const Tensor& x, int64_t count, const Tensor& out) override {
    Call c(__func__, {&x, &out});
    inner_->gather_tokens(x, count, out);
  }
  void scatter_tokens(const Tensor& grad, const Tensor& grad_x) override {
    Call c(__func__, {&grad, &grad_x});
    inner_->scatter_tokens(grad, grad_x);
  }
  void cls_and_mean_forward(const Tensor& x, int64_t skip, const Tensor& out) override {
    Call c(__func__, {&x, &out});
    inner_->cls_and_mean_forward(x, skip, out);
  }
  void cls_and_mean_backward(const Tensor& grad, int64_t skip, const Tensor& grad_x) override {
    Call c(__func__, {&grad, &grad_x});
    inner_->cls_and_mean_backward(grad, skip, grad_x);
  }
  void lora_forward(const Tensor& in, const Tensor& a, const Tensor& b, double scale, const Tensor& low,
                    const Tensor& out, int64_t column) override {
    Call c(__func__, {&in, &a, &b, &low, &out});
    inner_->lora_forward(in, a, b, scale, low, out, column);
  }
  void lora_backward(const Tensor& grad_out, int64_t column, const Tensor& in, const Tensor& a, const Tensor& b,
                     double scale, const Tensor& low, const Tensor* grad_in, const Tensor* grad_a,
                     const Tensor* grad_b) override {
    Call c(__func__, {&grad_out, &in, &a, &b, &low, grad_in, grad_a, grad_b});
    inner_->lora_backward(grad_out, column, in, a, b, scale, low, grad_in, grad_a, grad_b);
  }

  // The training state: parameters, gradients and moments are device tensors; `squares` and `bounds` are host arrays
  // (the results and run tables the contracts put on the host).
  void adamw_update(const OptimizerStep& step, const OptimizerScalars& s) override {
    Call c(__func__, {&step.params, &step.grads, &step.exp_avg, &step.exp_avg_sq}, true);
    inner_->adamw_update(step, s);
  }
  void lamb_moments(const OptimizerStep& step, const OptimizerScalars& s, std::span<double> squares) override {
    Call c(__func__, {&step.params, &step.grads, &step.exp_avg, &step.exp_avg_sq}, true);
    inner_->lamb_moments(step, s, squares);
  }
  void lamb_update(const OptimizerStep& step, const OptimizerScalars& s) override {
    Call c(__func__, {&step.params, &step.grads, &step.exp_avg, &step.exp_avg_sq}, true);
    inner_->lamb_update(step, s);
  }
  void sgd_update(const OptimizerStep& step, const OptimizerScalars& s) override {
    Call c(__func__, {&step.params, &step.grads, &step.exp_avg}, true);
    inner_->sgd_update(step, s);
  }
  double sum_of_squares(const Tensor& x, std::span<const int64_t> bounds) override {
    Call c(__func__, {&x}, true);
    return inner_->sum_of_squares(x, bounds);
  }
  void zero(const Tensor& t) override {
    Call c(__func__, {&t}, true);
    inner_->zero(t);
  }
  // Only the device side is watched: the host side is the caller's memory, which it reads or filled.
  void copy_to_host(const Tensor& device, const Tensor& host) override {
    Call c(__func__, {&device}, true);
    inner_->copy_to_host(device, host);
  }
  void copy_from_host(const Tensor& host, const Tensor& device) override {
    Call c(__func__, {&device}, true);
    inner_->copy_from_host(host, device);
  }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace

std::unique_ptr<Backend> make_seam_backend(std::unique_ptr<Backend> inner, SeamWatch watch) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_installed) g_state_only = watch == SeamWatch::training_state;
  }
  return std::make_unique<SeamBackendImpl>(std::move(inner));
}

void seam_release() {
  std::lock_guard<std::mutex> lock(g_mutex);
  set_all(PROT_READ | PROT_WRITE);
  g_released = true;
  g_kept.clear();
}

SeamReport seam_report() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return {g_region_count, g_watched_bytes, g_handed_bytes, g_touch_count};
}

void seam_print_touches(std::FILE* out) {
  const int n = g_touch_count < kMaxTouches ? g_touch_count : kMaxTouches;
  for (int i = 0; i < n; ++i) {
    const Region& r = g_regions[g_touches[i].region];
    std::fprintf(out, "seam: touch %d at %#lx, in tensor %d handed to %s, from:\n", i + 1,
                 static_cast<unsigned long>(g_touches[i].address), r.argument, r.call);
    // Frame 0 is the handler, 1 the signal trampoline. addr2line names static functions and lambdas too, which
    // backtrace_symbols (exported symbols only) does not.
    for (int f = 2; f < g_touches[i].frames; ++f) {
      Dl_info where{};
      if (::dladdr(g_touches[i].stack[f], &where) == 0 || where.dli_fname == nullptr) continue;
      const uintptr_t offset = reinterpret_cast<uintptr_t>(g_touches[i].stack[f]) -
                               reinterpret_cast<uintptr_t>(where.dli_fbase) - 1;  // the call, not the return
      char hex[32];
      std::snprintf(hex, sizeof hex, "%#lx", static_cast<unsigned long>(offset));
      const std::string command = "addr2line -f -C -e '" + std::string(where.dli_fname) + "' " + hex + " 2>/dev/null";
      std::string name;
      if (std::FILE* pipe = ::popen(command.c_str(), "r")) {
        char text[512];
        if (std::fgets(text, sizeof text, pipe) != nullptr) name = text;
        ::pclose(pipe);
      }
      if (!name.empty() && name.back() == '\n') name.pop_back();
      if (name.empty() || name == "??") name = where.dli_sname != nullptr ? where.dli_sname : "?";
      std::fprintf(out, "        %s (%s)\n", name.c_str(), where.dli_fname);
    }
  }
}

}  // namespace vitpipe
