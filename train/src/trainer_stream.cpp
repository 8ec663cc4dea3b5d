// data.stream: a benchmark's training split read batch by batch from its files
// (window_stream.h), or kept in memory; the training batches either way.
#include <fno_data/benchmark_stream.h>

#include "trainer_state.h"

namespace fno {

namespace {

// "75 MiB", "9.38 GiB".
std::string bytes_text(int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b < 1073741824.0) {
    std::snprintf(buf, sizeof(buf), "%.3g MiB", b / 1048576.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g GiB", b / 1073741824.0);
  }
  return buf;
}

}  // namespace

bool Trainer::State::start_stream(const std::shared_ptr<const data::BenchmarkSet>& set) {
  const auto& d = cfg.data;
  if (d.stream == DataStream::kOff) return false;
  if (d.stream == DataStream::kAuto) {
    // The windows as the resident path keeps them: x and y, float32.
    const auto [xs, ys] = data::window_shapes(*set, set->n_windows());
    const auto numel = [](const std::vector<int64_t>& s) {
      int64_t n = 1;
      for (int64_t v : s) n *= v;
      return n;
    };
    int64_t bytes = (numel(xs) + numel(ys)) * static_cast<int64_t>(sizeof(float));
    if (domain) {  // (this rank's rows; the widest band's, so that every rank decides alike)
      const auto& b = domain->band;
      bytes = bytes / xs[2] * band_rows(b.grid_rows, b.ranks, 0).second;
    }
    const int64_t available = detail::host_available_bytes();
    int64_t budget = d.host_memory_limit > 0 ? d.host_memory_limit : available / 2;
    if (domain && d.host_memory_limit <= 0 && group) {
      // Half of each rank's own free memory may differ between ranks: the
      // least of them on every rank, so that all refuse alike (one line each)
      // rather than one refusing while the others wait for it.
      budget = -group->all_reduce_max(-budget);
    }
    if (budget <= 0 || bytes <= budget) return false;
    if (domain) {
      throw ConfigError(set->files().front() + ": data.stream auto: a band's rows of the " +
                        "training split's windows take " + bytes_text(bytes) +
                        ", more than the budget " + bytes_text(budget) +
                        ", and distributed.domain_parallel holds them in memory (raise "
                        "data.host_memory_limit)");
    }
    if (main()) {
      std::fprintf(
          stderr,
          "fno_train: data.stream auto: the training split's %lld windows take %s, more "
          "than %s; streaming them from the files\n",
          static_cast<long long>(set->n_windows()), bytes_text(bytes).c_str(),
          d.host_memory_limit > 0
              ? ("data.host_memory_limit " + bytes_text(budget)).c_str()
              : ("half of the " + bytes_text(available) + " of host memory available").c_str());
    }
  }
  stream = std::make_unique<detail::WindowStream>(
      set, [this](int64_t epoch) { return epoch_batches(epoch); }, cfg.training.epochs, device);
  return true;
}

void Trainer::State::fit_streamed_normalizers() {
  const auto& d = cfg.data;
  // channel: the fields' statistics (load_data), the same as the resident path's.
  if (d.normalization != data::NormalizerMode::kPointwise) return;
  if (!d.encode_input && !d.encode_output) return;
  const auto st = data::pointwise_window_stats(stream->set(), std::max<int64_t>(d.batch_size, 64));
  if (d.encode_input) in_norm.set_state(st.x_mean, st.x_std);
  if (d.encode_output) out_norm.set_state(st.y_mean, st.y_std);
}

int64_t Trainer::State::n_train_samples() const {
  return stream ? stream->set().n_windows() : train_x.size(0);
}

std::vector<int64_t> Trainer::State::train_shape() const {
  if (stream) return data::window_shapes(stream->set(), stream->set().n_windows()).first;
  return train_x.sizes().vec();
}

std::vector<torch::Tensor> Trainer::State::epoch_batches(int64_t epoch) const {
  return data::epoch_batches(n_train_samples(), cfg.data.batch_size, cfg.data.shuffle,
                             static_cast<uint64_t>(cfg.training.seed), epoch, shard(), shards());
}

std::pair<torch::Tensor, torch::Tensor> Trainer::State::training_batch(
    int64_t epoch, int64_t b, const torch::Tensor& index) const {
  if (!stream) {
    return {model_input(train_x.index_select(0, index).to(device, true)),
            train_y.index_select(0, index).to(device, true)};
  }
  // x, y: [B, C, *S] raw, on the device -> normalized as the resident path keeps them
  auto [x, y] = stream->batch(epoch, b);
  if (cfg.data.encode_input) x = in_norm.transform(x);
  if (cfg.data.encode_output) y = out_norm.transform(y);
  return {model_input(x), y};
}

}  // namespace fno
