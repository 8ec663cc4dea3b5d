// Internal to predict(): the run's normalizers (where they are kept, and
// whether they apply at the input's grid), the device, the grid's text, and
// the output's attributes and JSON arrays.
#pragma once

#include <fno/band.h>
#include <fno/fno.h>
#include <fno/precision.h>
#include <fno/serialize.h>
#include <fno_data/darcy.h>
#include <fno_engine/forward_plan.h>
#include <fno_train/config.h>

#include <ATen/core/Tensor.h>
#include <torch/types.h>

#include <string>
#include <vector>

namespace fno::detail {

/// "64x64x16".
inline std::string grid_text(at::IntArrayRef sizes) {
  std::string s;
  for (const auto v : sizes) s += (s.empty() ? "" : "x") + std::to_string(v);
  return s;
}

/// Whether any key of `d` starts with `prefix`.
bool has_prefix(const TensorDict& d, const std::string& prefix);

/// The FNO of `options` in `precision`'s compute type with the weights of the
/// file `path` (a state dict, or a checkpoint's model.* entries), on `device`,
/// in eval mode; the file's tensors into `file`. A state dict that does not
/// match throws std::runtime_error, one line naming `path` and `settings`
/// (where the settings came from).
FNO load_model_weights(const FNOOptions& options, Precision precision, const std::string& path,
                       const std::string& settings, torch::Device device, TensorDict& file);

/// The run's normalizers into `in` and `out`: from the weights' own checkpoint
/// when it holds them, else normalizers.pt (written beside model.pt since
/// issue 49), else the latest checkpoint (older runs). Returns the source's
/// name ("" when the run normalizes nothing); throws std::runtime_error
/// naming the run or the file when they are missing.
std::string load_normalizers(const RunConfig& cfg, const std::string& run_dir,
                             const TensorDict& weights_file, const std::string& weights_path,
                             data::UnitGaussianNormalizer& in, data::UnitGaussianNormalizer& out);

/// A pointwise normalizer holds one statistic per grid point of the training
/// grid: it has no value at another grid's points. Throws std::runtime_error
/// naming `input` when `norm` is pointwise and fitted at another grid than `grid`.
void check_normalizer_grid(const data::UnitGaussianNormalizer& norm, const char* which,
                           at::IntArrayRef grid, const std::string& input);

/// "cpu", "auto", "cuda" or "cuda:N" as a device; throws PredictUsageError
/// naming --device when there is no such device.
torch::Device pick_device(const std::string& name);

/// The engine's refusal of a budget, in fno_predict's flags (--tile-rows: a
/// PredictUsageError; the memory limits: std::runtime_error).
[[noreturn]] void reword_budget(const ForwardBudgetError& e);

/// The squared norms of a batch's errors over this rank's rows of `band` (of
/// `grid_rows` rows), added over the band's ranks, in float64: per sample and
/// channel, sum e^2, sum y^2 and the sums of the squared first differences of
/// e and of y (H1Loss's: periodic central differences, step 1 / size; along
/// the rows with one halo row from each neighbouring band). Called alike on
/// every rank of the band.
// out, y: [B, C, n, *S'] (this rank's rows, decoded) -> [4, B, C] float64 on the CPU
torch::Tensor band_error_sums(const Band& band, int64_t grid_rows, const torch::Tensor& out,
                              const torch::Tensor& y);

/// "[v0, v1, ...]" with JSON numbers.
std::string json_array(const std::vector<double>& v);

/// An HDF5 attribute of text, or of a number.
data::Attribute text_attr(const std::string& name, const std::string& text);
data::Attribute number_attr(const std::string& name, double v);

}  // namespace fno::detail
