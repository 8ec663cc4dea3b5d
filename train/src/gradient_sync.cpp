// GradientSync (fno_train/distributed.h): the gradients' all-reduce in
// buckets that start during backward, on a Group's backend.
#include "distributed_impl.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <mutex>
#include <unordered_map>

namespace fno::dist {

using detail::real_view;

// ---------------------------------------------------------------------------
// GradientSync

struct GradientSync::Impl {
  std::shared_ptr<Group> group;
  std::vector<at::Tensor> params;
  // Keeps each parameter's AccumulateGrad node (and our hook on it) alive;
  // empty while the hooks are off (set_hooks(false)).
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> hooks;  // the keys of ours, one on each node

  // A post hook on each parameter's AccumulateGrad: it runs after every
  // accumulation into .grad (the nested backward of recompute included). The
  // node is made (or found) here, on the current stream: autograd runs a
  // parameter's accumulation on the stream its node was made on, and a step
  // captured on another stream would wait for that one inside the capture
  // (the legacy default stream's implicit dependency, which ends a capture).
  void attach() {
    if (!accumulators.empty()) return;
    for (size_t i = 0; i < params.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(params[i]);
      TORCH_CHECK(acc, "GradientSync: parameter ", i, " is not a leaf that accumulates gradients");
      Impl* raw = this;
      hooks.push_back(acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [raw, i](const torch::autograd::variable_list& outputs,
                   const torch::autograd::variable_list&) {
            raw->accumulated(i);
            return outputs;
          })));
      accumulators.push_back(std::move(acc));
    }
  }

  // Our hooks off their nodes, and the nodes let go: the next forward makes
  // new ones on its own stream.
  void detach() {
    for (size_t i = 0; i < accumulators.size(); ++i) accumulators[i]->del_post_hook(hooks[i]);
    accumulators.clear();
    hooks.clear();
  }

  struct Bucket {
    std::vector<size_t> params;  // indices into params
    std::vector<int64_t> offsets;
    at::Tensor flat;  // float, the real views of the gradients back to back
    int64_t pending = 0;
    bool launched = false;
    c10::intrusive_ptr<c10d::Work> work;
  };
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of;  // param -> bucket

  std::mutex mu;
  bool armed = false;
  std::string key;
  std::unordered_map<std::string, std::vector<int64_t>> expected;  // key -> accumulations per param
  const std::vector<int64_t>* want = nullptr;                      // expected[key], when learned
  std::vector<int64_t> count;
  size_t next = 0;  // the next bucket to launch (in order, on every rank)
  int64_t overlapped = 0;
  std::string violation;

  // Bucket b's gradients into its flat buffer (zeros where a parameter has none).
  void fill(size_t b) {
    auto& bk = buckets[b];
    for (size_t k = 0; k < bk.params.size(); ++k) {
      const auto& p = params[bk.params[k]];
      auto dst = bk.flat.narrow(0, bk.offsets[k], bk.offsets[k + 1] - bk.offsets[k]);
      if (p.grad().defined()) {
        dst.copy_(real_view(p.grad()).reshape({-1}));
      } else {
        dst.zero_();
      }
    }
  }

  // Bucket b's flat buffer back into its gradients.
  void write_back(size_t b) {
    auto& bk = buckets[b];
    for (size_t k = 0; k < bk.params.size(); ++k) {
      auto param = params[bk.params[k]];
      const auto src = bk.flat.narrow(0, bk.offsets[k], bk.offsets[k + 1] - bk.offsets[k]);
      if (!param.grad().defined()) param.mutable_grad() = at::zeros_like(param);
      real_view(param.grad()).copy_(src.view(real_view(param).sizes()));
    }
  }

  // Bucket b's all-reduce, started (finish() or reduce() waits for it).
  void start(size_t b) {
    auto& bk = buckets[b];
    std::vector<at::Tensor> one{bk.flat};
    bk.work = group->p_->guarded("gradient all-reduce",
                                 [&] { return group->p_->backend->allreduce(one); });
  }

  void launch(size_t b) {
    fill(b);
    start(b);
    buckets[b].launched = true;
  }

  void launch_ready() {
    while (next < buckets.size() && buckets[next].pending == 0) launch(next++);
  }

  // After an accumulation into params[i] (the AccumulateGrad post hook).
  void accumulated(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (!armed) return;
    ++count[i];
    if (want == nullptr) return;  // learning this key: everything is reduced in finish()
    const int64_t w = (*want)[i];
    auto& bk = buckets[bucket_of[i]];
    if (count[i] > w || bk.launched) {
      if (violation.empty()) {
        violation = "parameter " + std::to_string(i) + " accumulated a gradient " +
                    std::to_string(count[i]) + " times, more than the " + std::to_string(w) +
                    " times learned for '" + key + "'";
      }
      return;
    }
    if (count[i] == w && --bk.pending == 0) {
      launch_ready();
      // Launched before finish(): overlapping backward.
      overlapped = static_cast<int64_t>(next);
    }
  }
};

GradientSync::GradientSync(std::shared_ptr<Group> group, std::vector<torch::Tensor> params,
                           GradientSyncOptions options)
    : p_(std::make_unique<Impl>()) {
  auto& p = *p_;
  p.group = std::move(group);
  TORCH_CHECK(p.group, "GradientSync: no process group");
  TORCH_CHECK(options.bucket_bytes > 0, "GradientSync: bucket_bytes must be > 0, got ",
              options.bucket_bytes);
  for (auto& t : params) {
    if (t.requires_grad()) p.params.push_back(t);
  }
  // Buckets in reverse parameter order, each up to bucket_bytes of float.
  p.bucket_of.assign(p.params.size(), 0);
  Impl::Bucket cur;
  int64_t bytes = 0;
  const auto close = [&] {
    if (cur.params.empty()) return;
    cur.flat = at::zeros({cur.offsets.back()},
                         at::TensorOptions().dtype(at::kFloat).device(p.group->device()));
    p.buckets.push_back(std::move(cur));
    cur = Impl::Bucket();
    bytes = 0;
  };
  for (size_t k = p.params.size(); k-- > 0;) {
    const auto& t = p.params[k];
    TORCH_CHECK(t.device() == p.group->device(), "GradientSync: parameter ", k, " is on ",
                t.device(), ", the group on ", p.group->device());
    TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kComplexFloat,
                "GradientSync: parameter ", k, " is ", t.scalar_type(),
                "; float and complex float are reduced");
    const int64_t n = real_view(t).numel();
    if (!cur.params.empty() && (bytes + n * 4) > options.bucket_bytes) close();
    if (cur.offsets.empty()) cur.offsets.push_back(0);
    p.bucket_of[k] = p.buckets.size();
    cur.params.push_back(k);
    cur.offsets.push_back(cur.offsets.back() + n);
    bytes += n * 4;
  }
  close();
  p.count.assign(p.params.size(), 0);
  p.attach();
}

GradientSync::~GradientSync() {
  // The hooks outlive nothing: off their nodes before this goes.
  std::lock_guard<std::mutex> lock(p_->mu);
  p_->armed = false;
  p_->detach();
}

void GradientSync::set_hooks(bool on) {
  std::lock_guard<std::mutex> lock(p_->mu);
  TORCH_CHECK(!p_->armed, "GradientSync: set_hooks during an armed step");
  if (on) {
    p_->attach();
  } else {
    p_->detach();
  }
}

void GradientSync::arm(const std::string& key) {
  auto& p = *p_;
  std::lock_guard<std::mutex> lock(p.mu);
  p.armed = true;
  p.key = key;
  p.count.assign(p.params.size(), 0);
  p.next = 0;
  p.overlapped = 0;
  p.violation.clear();
  auto it = p.expected.find(key);
  p.want = it == p.expected.end() ? nullptr : &it->second;
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    auto& bk = p.buckets[b];
    bk.launched = false;
    bk.work.reset();
    bk.pending = 0;
    if (p.want != nullptr) {
      for (size_t i : bk.params) bk.pending += (*p.want)[i] > 0 ? 1 : 0;
    } else {
      bk.pending = 1;  // held until finish()
    }
  }
  // Buckets whose parameters get no gradient in this step are ready at once:
  // they are launched with the first real one, in order.
}

void GradientSync::finish() {
  auto& p = *p_;
  p.group->drain();  // the ordered sums first, as every blocking collective
  std::unique_lock<std::mutex> lock(p.mu);
  if (!p.armed) return;
  p.armed = false;
  if (!p.violation.empty()) {
    throw Error(p.group->p_->who() + ": gradient sync: " + p.violation);
  }
  if (p.want == nullptr) {
    p.expected[p.key] = p.count;
  }
  for (auto& bk : p.buckets) bk.pending = 0;
  p.launch_ready();
  lock.unlock();
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    auto& bk = p.buckets[b];
    p.group->p_->wait(bk.work, "gradient all-reduce");
    p.write_back(b);
    bk.work.reset();
  }
}

void GradientSync::pack() {
  auto& p = *p_;
  for (size_t b = 0; b < p.buckets.size(); ++b) p.fill(b);
}

void GradientSync::reduce() {
  auto& p = *p_;
  if (p.group->backend_name() == "nccl") {
    std::vector<at::Tensor> flats;
    for (auto& bk : p.buckets) flats.push_back(bk.flat);
    p.group->all_reduce_sum_ordered(flats);
    return;
  }
  p.group->drain();
  for (size_t b = 0; b < p.buckets.size(); ++b) p.start(b);
  for (auto& bk : p.buckets) {
    p.group->p_->wait(bk.work, "gradient all-reduce");
    bk.work.reset();
  }
}

void GradientSync::unpack() {
  auto& p = *p_;
  for (size_t b = 0; b < p.buckets.size(); ++b) p.write_back(b);
}

void GradientSync::drain() { p_->group->drain(); }

int64_t GradientSync::buckets() const { return static_cast<int64_t>(p_->buckets.size()); }
int64_t GradientSync::overlapped_last_step() const { return p_->overlapped; }

}  // namespace fno::dist
