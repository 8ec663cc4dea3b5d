#include <fno_data/darcy.h>

#include <algorithm>

#include <fno/torch_file.h>

#include <torch/torch.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <stdexcept>

namespace fno::data {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

std::string shape_string(torch::IntArrayRef s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

}  // namespace

std::string to_string(Layout layout) {
  switch (layout) {
    case Layout::kGrid:
      return "grid";
    case Layout::kChannelsFirst:
      return "channels_first";
    case Layout::kChannelsLast:
      return "channels_last";
  }
  return "?";
}

torch::Tensor to_channels(const torch::Tensor& array, Layout layout) {
  switch (layout) {
    case Layout::kGrid:
      return array.unsqueeze(1);
    case Layout::kChannelsFirst:
      return array;
    case Layout::kChannelsLast:
      return array.movedim(-1, 1);
  }
  return array;
}

std::string layout_ranks(Layout layout) {
  switch (layout) {
    case Layout::kGrid:
      return "3 (N, R1, R2) or 4 (N, R1, R2, R3)";
    case Layout::kChannelsFirst:
      return "4 (N, C, R1, R2) or 5 (N, C, R1, R2, R3)";
    case Layout::kChannelsLast:
      return "4 (N, R1, R2, C) or 5 (N, R1, R2, R3, C)";
  }
  return "?";
}

FileFormat detect_format(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  if (st.st_size == 0) fail(path, "empty file");
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  static const std::array<unsigned char, 8> kHdf5 = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  std::array<unsigned char, 8> head{};
  FileFormat format = FileFormat::kTorchSave;
  bool known = false;
  if (::pread(fd, head.data(), 4, 0) == 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 &&
      head[3] == 4) {
    known = true;  // a zip archive: torch.save
  } else {
    // The HDF5 superblock sits at 0, 512, 1024, 2048, ... (after a user block).
    for (off_t off = 0; off < st.st_size && off <= (off_t(1) << 20); off = off ? off * 2 : 512) {
      if (::pread(fd, head.data(), 8, off) == 8 && head == kHdf5) {
        format = FileFormat::kHdf5;
        known = true;
        break;
      }
    }
  }
  ::close(fd);
  if (!known) fail(path, "neither a torch.save (.pt) nor an HDF5 (.h5/.mat v7.3) file");
  return format;
}

FieldPairs load_darcy(const std::string& path, const LoadOptions& options) {
  TORCH_CHECK(options.subsample() >= 1, path, ": subsample must be >= 1, got ", options.subsample());
  return detect_format(path) == FileFormat::kHdf5 ? load_hdf5(path, options)
                                                  : load_torch_file(path, options);
}

FieldPairs load_torch_file(const std::string& path, const LoadOptions& options) {
  if (options.subsample() < 1) fail(path, "subsample must be >= 1, got " + std::to_string(options.subsample()));
  const c10::IValue value = fno::read_torch_file(path);
  if (!value.isGenericDict()) fail(path, "expected a dict {x, y} of tensors");
  const auto dict = value.toGenericDict();
  auto get = [&](const std::string& key, const std::string& setting) {
    std::string found;
    for (const auto& item : dict) {
      if (!item.key().isString()) continue;
      if (item.key().toStringRef() == key) {
        if (!item.value().isTensor()) fail(path, "entry '" + key + "' is not a tensor");
        return item.value().toTensor();
      }
      found += (found.empty() ? "" : ", ") + item.key().toStringRef();
    }
    fail(path, "no entry '" + key + "' (found: " + found + ")" +
                   (setting.empty() ? "" : "; set " + setting + " to its name"));
  };
  const std::string xk = options.x_key().empty() ? "x" : options.x_key();
  const std::string yk = options.y_key().empty() ? "y" : options.y_key();
  auto x = get(xk, options.x_key_setting());
  auto y = get(yk, options.y_key_setting());
  struct Array {
    const std::string& name;
    const torch::Tensor& t;
    Layout layout;
  };
  for (const auto& [name, t, layout] :
       {Array{xk, x, options.x_layout()}, Array{yk, y, options.y_layout()}}) {
    const int64_t extra = layout == Layout::kGrid ? 0 : 1;  // a channel dim
    if (t.dim() != 3 + extra && t.dim() != 4 + extra) {
      fail(path, "'" + name + "' has rank " + std::to_string(t.dim()) + ", expected " +
                     layout_ranks(layout) +
                     (layout == Layout::kGrid && t.dim() == 5
                          ? " (C channels per sample: a channel layout, data.x_layout/y_layout)"
                          : ""));
    }
    if (t.is_complex() || !(t.is_floating_point() || t.scalar_type() == torch::kBool ||
                            c10::isIntegralType(t.scalar_type(), /*includeBool=*/true))) {
      fail(path, "'" + name + "' has non-numeric dtype " + std::string(c10::toString(t.scalar_type())));
    }
  }
  if (options.x_layout() == options.y_layout() && x.sizes() != y.sizes()) {
    // An array of rank 4 read as a grid may be channels of a 2D grid.
    const bool channels = options.x_layout() == Layout::kGrid && (x.dim() == 4 || y.dim() == 4);
    fail(path, "'" + xk + "' has shape " + shape_string(x.sizes()) + " but '" + yk + "' has " +
                   shape_string(y.sizes()) +
                   (channels ? "; if one holds channels, (N, C, R1, R2) or (N, R1, R2, C), set its "
                               "layout (data.x_layout/y_layout)"
                             : ""));
  }
  if (x.size(0) != y.size(0)) {
    fail(path, "'" + xk + "' holds " + std::to_string(x.size(0)) + " samples but '" + yk + "' " +
                   std::to_string(y.size(0)));
  }
  int64_t n = x.size(0);
  if (options.n_samples() >= 0) {
    if (options.n_samples() > n) {
      std::cerr << path << ": asked for " << options.n_samples() << " samples, file holds " << n
                << "; using " << n << "\n";
    } else {
      n = options.n_samples();
    }
  }
  const int64_t k = options.subsample();
  // The files' tensors are non-contiguous (sample index fastest): slice the
  // views first, then make one contiguous float32 copy of what is kept. A
  // channel dim is kept whole.
  auto take = [&](const torch::Tensor& t, Layout layout) {
    torch::Tensor kept = to_channels(t.narrow(0, 0, n), layout);
    for (int64_t d = 2; d < kept.dim(); ++d) kept = kept.slice(d, 0, kept.size(d), k);
    return kept.to(torch::kFloat).contiguous();
  };
  FieldPairs pairs{take(x, options.x_layout()), take(y, options.y_layout())};
  validate(pairs, path);
  return pairs;
}

void validate(const FieldPairs& pairs, const std::string& what) {
  if (!pairs.x.defined() || !pairs.y.defined()) fail(what, "no data");
  if (pairs.x.dim() < 3) fail(what, "inputs have rank " + std::to_string(pairs.x.dim()) + ", expected [N, C, *S]");
  if (pairs.x.size(0) == 0) fail(what, "holds 0 samples");
  if (pairs.x.size(0) != pairs.y.size(0)) {
    fail(what, std::to_string(pairs.x.size(0)) + " inputs but " + std::to_string(pairs.y.size(0)) + " outputs");
  }
  if (pairs.x.sizes().slice(2) != pairs.y.sizes().slice(2)) {
    fail(what, "input grid " + shape_string(pairs.x.sizes().slice(2)) + " differs from output grid " +
                   shape_string(pairs.y.sizes().slice(2)));
  }
  for (int64_t i = 2; i < pairs.x.dim(); ++i) {
    if (pairs.x.size(i) < 1) fail(what, "empty grid " + shape_string(pairs.x.sizes().slice(2)));
  }
  if (!torch::isfinite(pairs.x).all().item<bool>()) fail(what, "NaN or Inf in the inputs");
  if (!torch::isfinite(pairs.y).all().item<bool>()) fail(what, "NaN or Inf in the outputs");
}

// ---------------------------------------------------------------------------
// UnitGaussianNormalizer
// ---------------------------------------------------------------------------
void UnitGaussianNormalizer::fit(const torch::Tensor& data) {
  TORCH_CHECK(data.dim() >= 2, "UnitGaussianNormalizer: expected [N, C, *S], got ", data.sizes());
  std::vector<int64_t> dims{0};
  if (mode_ != NormalizerMode::kPointwise) {
    for (int64_t i = 2; i < data.dim(); ++i) dims.push_back(i);
  } else if (data.size(0) < 2) {
    throw std::invalid_argument(
        "pointwise normalization needs at least 2 training samples (a std per grid point), got " +
        std::to_string(data.size(0)));
  }
  mean_ = data.mean(dims, /*keepdim=*/true);
  std_ = data.std(dims, /*unbiased=*/true, /*keepdim=*/true);
}

torch::Tensor UnitGaussianNormalizer::transform(const torch::Tensor& x) const {
  TORCH_CHECK(fitted(), "UnitGaussianNormalizer: transform before fit");
  return (x - mean_) / (std_ + eps());
}

torch::Tensor UnitGaussianNormalizer::inverse_transform(const torch::Tensor& x) const {
  TORCH_CHECK(fitted(), "UnitGaussianNormalizer: inverse_transform before fit");
  return x * (std_ + eps()) + mean_;
}

void UnitGaussianNormalizer::to(const torch::Device& device) {
  if (!fitted()) return;
  mean_ = mean_.to(device);
  std_ = std_.to(device);
}

std::vector<std::pair<std::string, torch::Tensor>> UnitGaussianNormalizer::state(
    const std::string& prefix) const {
  return {{prefix + "mean", mean_}, {prefix + "std", std_}};
}

void UnitGaussianNormalizer::set_state(torch::Tensor mean, torch::Tensor std) {
  if (fitted() && (mean.sizes() != mean_.sizes() || std.sizes() != std_.sizes())) {
    throw std::invalid_argument(
        "normalizer statistics of shape " + c10::str(mean.sizes()) + " where this run's " +
        (mode_ == NormalizerMode::kPointwise ? "pointwise" : "channel-wise") +
        " normalization has " + c10::str(mean_.sizes()) +
        " (a checkpoint of another data.normalization or data?)");
  }
  mean_ = std::move(mean);
  std_ = std::move(std);
}

// ---------------------------------------------------------------------------
// Batching
// ---------------------------------------------------------------------------
std::vector<torch::Tensor> epoch_batches(int64_t n_samples, int64_t batch_size, bool shuffle,
                                         uint64_t seed, int64_t epoch, int64_t rank,
                                         int64_t world_size) {
  TORCH_CHECK(n_samples > 0, "epoch_batches: no samples");
  TORCH_CHECK(batch_size > 0, "epoch_batches: batch_size must be > 0, got ", batch_size);
  TORCH_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "epoch_batches: rank ", rank,
              " of world_size ", world_size);
  torch::Tensor order;
  if (shuffle) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed * 1000003ULL + static_cast<uint64_t>(epoch));
    order = torch::randperm(n_samples, gen, torch::kLong);
  } else {
    order = torch::arange(n_samples, torch::kLong);
  }
  if (world_size > 1) {
    const int64_t total = (n_samples + world_size - 1) / world_size * world_size;
    while (order.numel() < total) {
      order =
          torch::cat({order, order.narrow(0, 0, std::min(order.numel(), total - order.numel()))});
    }
    order = order.slice(0, rank, total, world_size).contiguous();
  }
  return order.split(batch_size);
}

}  // namespace fno::data
