#include <fno_train/config.h>

#include <fno_offload/planner.h>

#include <yaml-cpp/yaml.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace fno {

std::string one_line(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

std::string to_string(OptimizerName name) {
  switch (name) {
    case OptimizerName::kAdamW:
      return "adamw";
    case OptimizerName::kAdam:
      return "adam";
  }
  return "?";
}

std::string to_string(SchedulerName name) {
  switch (name) {
    case SchedulerName::kCosine:
      return "cosine";
    case SchedulerName::kStep:
      return "step";
    case SchedulerName::kPlateau:
      return "plateau";
    case SchedulerName::kNone:
      return "none";
  }
  return "?";
}

std::string to_string(LossName name) {
  switch (name) {
    case LossName::kH1:
      return "h1";
    case LossName::kL2:
      return "l2";
  }
  return "?";
}

std::string to_string(Progress progress) {
  switch (progress) {
    case Progress::kAuto:
      return "auto";
    case Progress::kBar:
      return "bar";
    case Progress::kPlain:
      return "plain";
    case Progress::kNone:
      return "none";
  }
  return "?";
}

std::string to_string(DataProblem problem) {
  switch (problem) {
    case DataProblem::kDarcy:
      return "darcy";
    case DataProblem::kNavierStokes:
      return "ns";
  }
  return "?";
}

std::string to_string(NsMode mode) {
  switch (mode) {
    case NsMode::kSpaceTime:
      return "space_time";
    case NsMode::kRecurrent:
      return "recurrent";
  }
  return "?";
}

std::string to_string(data::NormalizerMode mode) {
  switch (mode) {
    case data::NormalizerMode::kChannel:
      return "channel";
    case data::NormalizerMode::kPointwise:
      return "pointwise";
  }
  return "?";
}

std::string to_string(LossSpace space) {
  switch (space) {
    case LossSpace::kNormalized:
      return "normalized";
    case LossSpace::kDecoded:
      return "decoded";
  }
  return "?";
}

std::string to_string(SpectralInit init) {
  switch (init) {
    case SpectralInit::kNeuralOperator:
      return "neuraloperator";
    case SpectralInit::kPaper:
      return "paper";
  }
  return "?";
}

std::string to_string(PaddingMode mode) {
  switch (mode) {
    case PaddingMode::kSymmetric:
      return "symmetric";
    case PaddingMode::kOneSided:
      return "one_sided";
  }
  return "?";
}

namespace {

// The values of each choice, in the order the schema lists them; their names
// are to_string's, so that a name is written once.
const std::vector<OptimizerName> kOptimizers{OptimizerName::kAdamW, OptimizerName::kAdam};
const std::vector<SchedulerName> kSchedulers{SchedulerName::kCosine, SchedulerName::kStep,
                                             SchedulerName::kPlateau, SchedulerName::kNone};
const std::vector<LossName> kLosses{LossName::kH1, LossName::kL2};
const std::vector<Precision> kPrecisions{Precision::kFP32, Precision::kTF32, Precision::kBF16,
                                         Precision::kFP16};
const std::vector<dist::Backend> kBackends{dist::Backend::kAuto, dist::Backend::kNccl,
                                           dist::Backend::kGloo};
const std::vector<Progress> kProgress{Progress::kAuto, Progress::kBar, Progress::kPlain,
                                      Progress::kNone};
const std::vector<DataProblem> kProblems{DataProblem::kDarcy, DataProblem::kNavierStokes};
const std::vector<NsMode> kNsModes{NsMode::kSpaceTime, NsMode::kRecurrent};
const std::vector<data::NormalizerMode> kNormalizations{data::NormalizerMode::kChannel,
                                                        data::NormalizerMode::kPointwise};
const std::vector<LossSpace> kLossSpaces{LossSpace::kNormalized, LossSpace::kDecoded};
const std::vector<PaddingMode> kPaddingModes{PaddingMode::kSymmetric, PaddingMode::kOneSided};
const std::vector<SpectralInit> kSpectralInits{SpectralInit::kNeuralOperator, SpectralInit::kPaper};
const std::vector<CudaGraphs> kCudaGraphs{CudaGraphs::kAuto, CudaGraphs::kOn, CudaGraphs::kOff};
const std::vector<data::Layout> kLayouts{data::Layout::kGrid, data::Layout::kChannelsFirst,
                                         data::Layout::kChannelsLast};

template <typename E>
std::vector<std::string> names(const std::vector<E>& values) {
  std::vector<std::string> out;
  for (const auto v : values) out.push_back(to_string(v));
  return out;
}

// The value named `text`; the schema has checked that it is one of them.
template <typename E>
E choice(const std::vector<E>& values, const std::string& text) {
  for (const auto v : values) {
    if (to_string(v) == text) return v;
  }
  throw std::logic_error("config: '" + text + "' passed the schema but names no value");
}

enum class Kind { kInt, kFloat, kBool, kString, kIntList, kFloatList, kStringList, kTests };

constexpr double kInf = std::numeric_limits<double>::infinity();
// Bounds that keep the counts derived from a key inside 64 bits: steps of an
// epoch and of a run (batch sizes, epochs), bytes of MiB.
constexpr double kMaxCount = 1e9;
constexpr double kMaxMib = 1073741824;  // 2^30 MiB, as offload.max_inflight_mib

// One key of the schema.
struct Entry {
  const char* key;  // "section.name"
  Kind kind;
  const char* default_yaml;  // the default, as YAML text
  const char* doc;
  double min = -kInf;  // numeric range (inclusive unless *_open)
  double max = kInf;
  bool min_open = false;
  bool max_open = false;
  std::vector<std::string> choices = {};  // allowed strings (for kString / kStringList)
  int min_len = 0;                        // list lengths
  int max_len = 1 << 20;
};

// Keys of one data.test entry. (One line per key.)
// clang-format off
const std::vector<Entry>& test_entries() {
  static const std::vector<Entry> kEntries = {
      {"file", Kind::kString, "''", "data file of the set (.pt, .h5, .mat); relative: to the config file's folder, or, given with --set, to the current directory"},
      {"name", Kind::kString, "''", "metric prefix (\"32\" gives 32_l2); default: the grid size"},
      {"n_samples", Kind::kInt, "-1", "first n samples (-1: all)", -1},
      {"batch_size", Kind::kInt, "32", "evaluation batch size", 1, kMaxCount},
  };
  return kEntries;
}

const std::vector<Entry>& schema() {
  static const std::vector<Entry> kSchema = {
      // model
      {"model.n_modes", Kind::kIntList, "[16, 16]", "Fourier modes kept per spatial dim; its length (1-3) is the dimension", 1, kInf, false, false, {}, 1, 3},
      {"model.in_channels", Kind::kInt, "1", "channels of the input function", 1},
      {"model.out_channels", Kind::kInt, "1", "channels of the output function", 1},
      {"model.hidden_channels", Kind::kInt, "32", "width of the FNO blocks", 1},
      {"model.n_layers", Kind::kInt, "4", "number of FNO blocks", 1},
      {"model.lifting_channel_ratio", Kind::kFloat, "2", "lifting MLP width / hidden_channels (0: one linear layer)", 0},
      {"model.projection_channel_ratio", Kind::kFloat, "2", "projection MLP width / hidden_channels", 0, kInf, true},
      {"model.positional_embedding", Kind::kBool, "true", "append the grid coordinates to the input"},
      {"model.use_channel_mlp", Kind::kBool, "true", "each block ends in a ChannelMLP with a soft-gated skip (neuraloperator's default); false: spectral conv + linear skip and GELU alone, the FNO paper's block (neuraloperator's use_channel_mlp=False, which applies GELU twice between blocks)"},
      {"model.single_gelu", Kind::kBool, "false", "with use_channel_mlp false only: one GELU between blocks, as the FNO paper's scripts (neuraloperator applies two); the state dict is unchanged"},
      {"model.spectral_init", Kind::kString, "neuraloperator", "how the blocks' spectral weights start: neuraloperator (complex normal, std sqrt(2 / (2 hidden_channels))) or paper (the FNO paper's scripts: real and imaginary parts uniform on [0, 1 / hidden_channels^2), the bias uniform on +-1 / sqrt(hidden_channels))", -kInf, kInf, false, false, names(kSpectralInits)},
      {"model.channel_mlp_expansion", Kind::kFloat, "0.5", "block ChannelMLP width / hidden_channels", 0, kInf, true},
      {"model.domain_padding", Kind::kFloatList, "[]", "zero padding as a fraction of each spatial size ([] none, [p] all dims)", 0, kInf, false, false, {}, 0, 3},
      {"model.domain_padding_mode", Kind::kString, "symmetric", "where the padding goes: symmetric (round(p * size) zeros at both ends, as neuraloperator) or one_sided (at the end alone, as the FNO paper's scripts)", -kInf, kInf, false, false, names(kPaddingModes)},
      // data
      {"data.train_file", Kind::kString, "''", "training data file (.pt, .h5, .mat); a relative path resolves against the config file's folder, or, given with --set, against the current directory"},
      {"data.n_train", Kind::kInt, "1000", "first n training samples (-1: all)", -1},
      {"data.batch_size", Kind::kInt, "32", "training batch size", 1, kMaxCount},
      {"data.shuffle", Kind::kBool, "true", "reshuffle the training set each epoch (seeded by training.seed)"},
      {"data.subsample", Kind::kInt, "1", "keep every k-th grid point of every set", 1},
      {"data.x_key", Kind::kString, "''", "name of the input array ('' = x in .pt, coeff in HDF5)"},
      {"data.y_key", Kind::kString, "''", "name of the output array ('' = y in .pt, sol in HDF5)"},
      {"data.x_layout", Kind::kString, "grid", "how the input array's dims after the sample dim read: grid ((N, *S): all spatial, one channel), channels_first ((N, C, *S): C channels, e.g. several coefficient fields) or channels_last ((N, *S, C): e.g. records in time as channels); C must equal model.in_channels", -kInf, kInf, false, false, names(kLayouts)},
      {"data.y_layout", Kind::kString, "grid", "the same for the output array; C must equal model.out_channels", -kInf, kInf, false, false, names(kLayouts)},
      {"data.encode_input", Kind::kBool, "false", "normalize inputs to zero mean and unit std over the training set (data.normalization)"},
      {"data.encode_output", Kind::kBool, "true", "normalize outputs the same way for training; metrics use decoded outputs"},
      {"data.normalization", Kind::kString, "channel", "the normalizers' statistics: channel (one mean and std per channel, as neuraloperator's UnitGaussianNormalizer, eps 1e-7) or pointwise (one per channel and grid point over the samples, as the FNO paper's scripts, eps 1e-5)", -kInf, kInf, false, false, names(kNormalizations)},
      {"data.test", Kind::kTests, "[]", "evaluation sets: a list of {file, name, n_samples, batch_size}"},
      {"data.n_predictions", Kind::kInt, "4", "test samples per set saved to predictions.h5", 0},
      {"data.problem", Kind::kString, "darcy", "what the files hold: darcy (input and output arrays, data.x_key and data.y_key; also Poisson 3D) or ns (Navier-Stokes records u (N, R, R, T) of fno_datagen --problem ns, read by data.x_key, '' = u; docs/data.md)", -kInf, kInf, false, false, names(kProblems)},
      {"data.ns_mode", Kind::kString, "space_time", "ns: space_time (a 3D FNO over x, y, t: the t_in records as channels in, the next t_out records out at once) or recurrent (a 2D FNO from the last t_in records to the next, rolled out t_out times, the loss summed over the rollout; offload.policy none only, no normalization)", -kInf, kInf, false, false, names(kNsModes)},
      {"data.t_in", Kind::kInt, "10", "ns: records given as input (= model.in_channels)", 1},
      {"data.t_out", Kind::kInt, "-1", "ns: records predicted after them (-1: the rest of the training file's records)", -1},
      // optimizer
      {"optimizer.name", Kind::kString, "adamw", "optimizer: adamw (neuraloperator's AdamW: decoupled weight decay) or adam (torch.optim.Adam, the FNO paper's: weight decay as an L2 term in the gradient, eps added to the bias-corrected sqrt(v), complex weights as real pairs)", -kInf, kInf, false, false, names(kOptimizers)},
      {"optimizer.lr", Kind::kFloat, "1.0e-3", "learning rate", 0, kInf, true},
      {"optimizer.weight_decay", Kind::kFloat, "0", "weight decay: adamw's decoupled decay, adam's L2 term", 0},
      {"optimizer.betas", Kind::kFloatList, "[0.9, 0.999]", "moment decay rates", 0, 1, false, true, {}, 2, 2},
      {"optimizer.eps", Kind::kFloat, "1.0e-6", "added to sqrt(second moment) (neuraloperator's default; torch.optim.Adam's is 1e-8)", 0},
      // scheduler
      {"scheduler.name", Kind::kString, "cosine", "lr schedule, stepped once per epoch", -kInf, kInf, false, false, names(kSchedulers)},
      {"scheduler.T_max", Kind::kInt, "30", "cosine: epochs of a half period", 1},
      {"scheduler.eta_min", Kind::kFloat, "0", "cosine: lowest lr", 0},
      {"scheduler.step_size", Kind::kInt, "100", "step: epochs between decays", 1},
      {"scheduler.gamma", Kind::kFloat, "0.5", "step: decay factor", 0, kInf, true},
      {"scheduler.factor", Kind::kFloat, "0.5", "plateau: decay factor when the training loss stalls", 0, 1, true, true},
      {"scheduler.patience", Kind::kInt, "5", "plateau: epochs without improvement before decaying", 0},
      // training
      {"training.epochs", Kind::kInt, "20", "number of epochs", 1, kMaxCount},
      {"training.loss", Kind::kString, "h1", "training loss (relative, summed over the batch)", -kInf, kInf, false, false, names(kLosses)},
      {"training.loss_on", Kind::kString, "normalized", "with data.encode_output, what the training loss compares: normalized (the normalized output and truth, as neuraloperator's Trainer) or decoded (both decoded, as the FNO paper's scripts)", -kInf, kInf, false, false, names(kLossSpaces)},
      {"training.eval_losses", Kind::kStringList, "[h1, l2]", "evaluation metrics (mean per-sample relative error)", -kInf, kInf, false, false, names(kLosses), 1, 2},
      {"training.eval_every", Kind::kInt, "1", "evaluate every n epochs (and after the last)", 1},
      {"training.checkpoint_every", Kind::kInt, "1", "write the latest checkpoint every n epochs (and after the last)", 1},
      {"training.seed", Kind::kInt, "0", "seed of the model initialization and the shuffling", 0},
      {"training.max_grad_norm", Kind::kFloat, "0", "clip the gradients to this total 2-norm before each optimizer step, as torch.nn.utils.clip_grad_norm_ (after the sum over ranks and fp16's unscaling), and log the norm before clipping per epoch (grad_norm: mean, grad_norm_max) in metrics.jsonl; 0: off. A value above every norm (1e30) logs without clipping", 0},
      {"training.precision", Kind::kString, "fp32", "compute precision: fp32, tf32 (fp32 GEMMs on TF32 tensor cores), bf16 or fp16 (activations, saved tensors and GEMM inputs in that type, fp32 accumulation; fp16 adds a dynamic loss scaler that skips steps with non-finite gradients). Weights, optimizer state, losses and state dicts stay fp32. One step against fp32, relative: bf16 output 4e-3, gradients 1e-2; fp16 5e-4 and 8e-4", -kInf, kInf, false, false, names(kPrecisions)},
      {"training.cuda_graphs", Kind::kString, "auto", "run each training step (forward, loss, backward, fp16's loss scaler, AdamW) and each evaluation batch as one CUDA graph per batch shape, replayed instead of launching its kernels one by one: auto (where graphs work: a CUDA device, offload.policy none with one micro-batch, one rank; else eager steps, with a line saying why for an offload policy or several ranks; a batch shape whose step takes over 50 ms, bound by its kernels rather than their launches, runs eagerly with a line), on (the same without the 50-ms limit, with a line whenever graphs cannot be used) or off (eager steps); a shape whose capture runs out of GPU memory runs eagerly, with a line. The metrics equal off's: the same kernels, and AdamW's step computed on the device in the host's order", -kInf, kInf, false, false, names(kCudaGraphs)},
      // device
      {"device.name", Kind::kString, "auto", "auto (CUDA when available), cpu, cuda or cuda:N"},
      // distributed (several processes under torchrun; README "Several GPUs")
      {"distributed.backend", Kind::kString, "auto", "c10d backend when launched by torchrun: auto (NCCL on CUDA, Gloo on the CPU), nccl or gloo", -kInf, kInf, false, false, names(kBackends)},
      {"distributed.timeout_s", Kind::kFloat, "300", "seconds a rank waits for the others (rendezvous, each collective) before it stops with an error", 0, kInf, true},
      {"distributed.bucket_mib", Kind::kFloat, "4", "MiB of gradients per all-reduce bucket; a bucket is reduced as soon as backward has produced it", 0, kInf, true},
      {"distributed.domain_parallel", Kind::kInt, "1", "ranks that share one sample, each a band of rows of the first spatial dim (a 2D or 3D model, run tiled; the spectra are summed over them); it divides the world size, the rest is data parallel", 1, kMaxCount},
      // offload
      {"offload.policy", Kind::kString, "none", "activation memory policy: none (nothing moves; on CUDA with the fused kernels, blocks and MLPs store only their inputs and recompute the rest, as slim), slim (recompute cheap activations), all, blocks:K (first K stages, lifting first; the model has model.n_layers + 2 stages), recompute, recompute+offload, auto (fits offload.gpu_memory_limit). Without a CUDA device nothing is offloaded: all and blocks:K run as none, recompute+offload as recompute, auto as none, with a line saying so, and config.yaml records the policy that ran"},
      {"offload.gpu_memory_limit", Kind::kString, "''", "GPU memory budget for auto, e.g. 16GiB (16 x 2^30 bytes) or 8GB (8 x 10^9 bytes): kB, MB, GB, TB are powers of 1000, KiB, MiB, GiB, TiB (and K, M, G, T) powers of 1024 ('': the device's free memory). The other policies plan nothing against it; it also bounds the data kept on the GPU and the out-of-memory advice"},
      {"offload.chunks", Kind::kInt, "1", "batch chunks per stage for the fixed policies (lowers the transient peak)", 1},
      {"offload.micro_batches", Kind::kInt, "1", "run each step as this many micro-batches whose gradients add up (the fixed policies; auto picks its own)", 1},
      {"offload.min_bytes", Kind::kInt, "1048576", "saved tensors smaller than this stay on the GPU", 0},
      {"offload.prefetch_depth", Kind::kInt, "1", "backward prefetches this many stages ahead", 0},
      {"offload.max_inflight_mib", Kind::kString, "auto", "device-to-host MiB in flight before forward waits (the back-pressure window, held in GPU memory), or auto: the fixed policies start at 1024 and, after a step whose forward waited on the link, grow it by what the link drained meanwhile, within offload.gpu_memory_limit or 90% of the GPU memory; auto policy plans keep 1024"},
      {"offload.max_prefetch_mib", Kind::kInt, "3072", "prefetched, not yet used MiB at most", 1, kMaxMib},
      {"offload.host_memory_limit", Kind::kString, "''", "pinned host memory at most, e.g. 64GiB ('': no limit; units as offload.gpu_memory_limit); beyond it activations stay on the GPU"},
      {"offload.timeline", Kind::kBool, "true", "write memory_timeline.csv: the GPU memory of one training step"},
      {"offload.compress", Kind::kString, "none", "host storage of offloaded float32 activations: none (lossless) or bf16 (half the PCIe bytes; rounded to bfloat16)"},
      {"offload.plan_cache", Kind::kString, "''", "directory where auto keeps its chosen plans for reuse by later runs ('': $FNO_PLAN_CACHE, else ~/.cache/fno/plans; none: no cache)"},
      // output
      {"output.dir", Kind::kString, "runs/darcy", "run directory (relative to the working directory); --out overrides"},
      {"output.progress", Kind::kString, "auto", "progress display on stderr: auto (a bar on a terminal, else plain), bar (redrawn as batches finish, with samples/s and the epoch's time left), plain (a line per epoch, and within an epoch longer than output.progress_every / 2 seconds a line every output.progress_every seconds with samples/s and the time left), or none", -kInf, kInf, false, false, names(kProgress)},
      {"output.progress_every", Kind::kFloat, "10", "plain progress: seconds between the lines within an epoch (the first after half of it)", 0, kInf, true},
  };
  return kSchema;
}
// clang-format on

const Entry* find_entry(const std::string& key) {
  for (const auto& e : schema()) {
    if (key == e.key) return &e;
  }
  return nullptr;
}

// A value and where it came from ("file:line" or "--set k=v").
struct Located {
  YAML::Node node;
  std::string where;
};

std::string where_of(const std::string& origin, const YAML::Node& node) {
  const auto mark = node.Mark();
  if (mark.line < 0) return origin;
  return origin + ":" + std::to_string(mark.line + 1);
}

[[noreturn]] void error(const std::string& where, const std::string& key, const std::string& msg) {
  throw ConfigError(where + ": " + key + ": " + msg);
}

std::string scalar_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

std::string range_text(const Entry& e) {
  std::ostringstream s;
  s.precision(17);  // bounds as written: 1000000000, not 1e+09
  const bool lo = std::isfinite(e.min), hi = std::isfinite(e.max);
  if (lo && hi) {
    s << " in " << (e.min_open ? "(" : "[") << e.min << ", " << e.max << (e.max_open ? ")" : "]");
  } else if (lo) {
    s << (e.min_open ? " > " : " >= ") << e.min;
  } else if (hi) {
    s << (e.max_open ? " < " : " <= ") << e.max;
  }
  return s.str();
}

void check_range(const Entry& e, double v, const std::string& where, const std::string& key,
                 const std::string& text, const char* what) {
  const bool bad = (e.min_open ? v <= e.min : v < e.min) || (e.max_open ? v >= e.max : v > e.max) ||
                   std::isnan(v);
  if (bad) error(where, key, std::string("expected ") + what + range_text(e) + ", got " + text);
}

int64_t to_int(const Entry& e, const YAML::Node& n, const std::string& where,
               const std::string& key) {
  int64_t v = 0;
  if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) {
    error(where, key,
          std::string("expected an integer") + range_text(e) + ", got '" + scalar_text(n) + "'");
  }
  check_range(e, static_cast<double>(v), where, key, n.Scalar(), "an integer");
  return v;
}

double to_float(const Entry& e, const YAML::Node& n, const std::string& where,
                const std::string& key) {
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || std::isinf(v)) {
    error(where, key,
          std::string("expected a number") + range_text(e) + ", got '" + scalar_text(n) + "'");
  }
  check_range(e, v, where, key, n.Scalar(), "a number");
  return v;
}

bool to_bool(const YAML::Node& n, const std::string& where, const std::string& key) {
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
    error(where, key, "expected true or false, got '" + scalar_text(n) + "'");
  }
  return v;
}

std::string to_string(const Entry& e, const YAML::Node& n, const std::string& where,
                      const std::string& key) {
  if (!(n.IsScalar() || n.IsNull())) error(where, key, "expected a string, got " + scalar_text(n));
  const std::string v = n.IsNull() ? "" : n.Scalar();
  if (!e.choices.empty()) {
    bool ok = false;
    std::string list;
    for (const auto& c : e.choices) {
      ok = ok || c == v;
      list += (list.empty() ? "" : ", ") + c;
    }
    if (!ok) error(where, key, "unknown value '" + v + "' (expected one of: " + list + ")");
  }
  return v;
}

const YAML::Node& check_list(const Entry& e, const YAML::Node& n, const std::string& where,
                             const std::string& key) {
  if (!n.IsSequence()) error(where, key, "expected a list, got '" + scalar_text(n) + "'");
  const int len = static_cast<int>(n.size());
  if (len < e.min_len || len > e.max_len) {
    std::ostringstream s;
    s << "expected a list of " << e.min_len;
    if (e.max_len != e.min_len) s << " to " << e.max_len;
    s << " entries, got " << len;
    error(where, key, s.str());
  }
  return n;
}

// Where a list item came from: its own line in the file, else the list's origin.
std::string item_where(const Located& list, const std::string& origin, const YAML::Node& item) {
  const bool from_file = list.where.rfind(origin + ":", 0) == 0;
  return from_file ? where_of(origin, item) : list.where;
}

// Schema key -> its value (from the file, --set, or the default).
using Values = std::map<std::string, Located>;

// A mapping key as a name; YAML also allows lists, maps and nulls as keys.
std::string key_name(const YAML::Node& key, const std::string& origin, const std::string& within) {
  if (!key.IsScalar()) {
    throw ConfigError(where_of(origin, key) + ": " + within + ": keys must be plain names, got " +
                      scalar_text(key));
  }
  return key.Scalar();
}

// The edit distance (insertions, deletions, substitutions) between a and b.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The candidate nearest to `word`, or "" when none is near: within a third of
// the word's length in edits (at least 2). A dotted key whose name is some
// other section's key ("training.batch_size") is near that key.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_cost = std::max<size_t>(2, word.size() / 3) + 1;
  const auto name_of = [](const std::string& k) {
    const auto dot = k.find('.');
    return dot == std::string::npos ? std::string() : k.substr(dot + 1);
  };
  for (const auto& c : candidates) {
    size_t cost = edit_distance(word, c);
    if (!name_of(word).empty() && name_of(word) == name_of(c)) cost = std::min<size_t>(cost, 1);
    if (cost < best_cost) {
      best_cost = cost;
      best = c;
    }
  }
  return best;
}

// " (did you mean K?)" for the known key nearest to an unknown `key`, or "".
std::string did_you_mean(const std::string& key) {
  std::vector<std::string> keys;
  for (const auto& e : schema()) keys.emplace_back(e.key);
  const auto best = nearest(key, keys);
  return best.empty() ? "" : " (did you mean " + best + "?)";
}

Values read_document(const YAML::Node& root, const std::string& origin) {
  Values values;
  if (root.IsNull())
    throw ConfigError(origin + ": empty config (expected sections model, data, ...)");
  if (!root.IsMap())
    throw ConfigError(where_of(origin, root) + ": expected a mapping of sections, got " +
                      scalar_text(root));
  for (const auto& section : root) {
    const std::string name = key_name(section.first, origin, "(top level)");
    bool known = false;
    for (const auto& e : schema()) known = known || std::string(e.key).rfind(name + ".", 0) == 0;
    if (!known) {
      const auto best = nearest(name, {"model", "data", "optimizer", "scheduler", "training",
                                       "device", "distributed", "offload", "output"});
      throw ConfigError(where_of(origin, section.first) + ": " + name + ": unknown section (" +
                        (best.empty() ? "" : "did you mean " + best + "? ") +
                        "expected model, data, optimizer, scheduler, training, device, "
                        "distributed, offload, output)");
    }
    if (!section.second.IsMap()) {
      throw ConfigError(where_of(origin, section.second) + ": " + name +
                        ": expected a mapping of keys, got " + scalar_text(section.second));
    }
    for (const auto& item : section.second) {
      const std::string key = name + "." + key_name(item.first, origin, name);
      if (find_entry(key) == nullptr) {
        throw ConfigError(where_of(origin, item.first) + ": " + key + ": unknown key" +
                          did_you_mean(key));
      }
      values[key] = {item.second, where_of(origin, item.second)};
    }
  }
  return values;
}

void apply_override(Values& values, const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError("--set " + text + ": expected section.key=value");
  }
  const std::string key = text.substr(0, eq);
  if (find_entry(key) == nullptr) {
    throw ConfigError("--set " + text + ": " + key + ": unknown key" + did_you_mean(key));
  }
  YAML::Node node;
  try {
    node = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError("--set " + text + ": " + key + ": malformed value: " + e.msg);
  }
  values[key] = {node, "--set " + text};
}

std::string dir_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string resolve(const std::string& base, const std::string& p) {
  if (p.empty() || p[0] == '/' || base.empty()) return p;
  return base + "/" + p;
}

// The current directory ("" when unknown).
std::string current_dir() {
  char buf[4096];
  return ::getcwd(buf, sizeof(buf)) == nullptr ? std::string() : std::string(buf);
}

// Whether a value came from the command line (--set), whose relative paths
// resolve against the current directory rather than the config's folder.
bool from_command_line(const Located& v) { return v.where.rfind("--set ", 0) == 0; }

// The absolute directory of `path` (so a run's config.yaml works from anywhere).
std::string absolute_dir(const std::string& path) {
  std::string dir = dir_of(path);
  if (!dir.empty() && dir[0] == '/') return dir;
  char buf[4096];
  if (::getcwd(buf, sizeof(buf)) == nullptr) return dir;
  return dir == "." ? std::string(buf) : std::string(buf) + "/" + dir;
}

// A key's value (from the file, --set, or the default).
Located value_of(const Values& given, const Entry& e, const std::string& origin) {
  auto it = given.find(e.key);
  if (it != given.end()) return it->second;
  return {YAML::Load(e.default_yaml), origin + " (default)"};
}

// The resolved entries of data.test, each checked against test_entries().
YAML::Node resolve_tests(const Entry& e, const Located& v, const std::string& origin,
                         const std::string& base_dir) {
  YAML::Node out(YAML::NodeType::Sequence);
  const std::string key = e.key;
  const auto& list = check_list(e, v.node, v.where, key);
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& item = list[i];
    const std::string item_key = key + "[" + std::to_string(i) + "]";
    const std::string iw = item_where(v, origin, item);
    if (!item.IsMap())
      error(iw, item_key, "expected a mapping {file, name, n_samples, batch_size}");
    YAML::Node test;
    for (const auto& kv : item) {
      const std::string k = key_name(kv.first, origin, item_key);
      bool known = false;
      std::vector<std::string> names;
      for (const auto& te : test_entries()) {
        known = known || k == te.key;
        names.emplace_back(te.key);
      }
      if (!known) {
        const auto best = nearest(k, names);
        error(iw, item_key + "." + k,
              "unknown key (" + (best.empty() ? "" : "did you mean " + best + "? ") +
                  "expected file, name, n_samples, batch_size)");
      }
    }
    for (const auto& te : test_entries()) {
      const YAML::Node n = item[te.key] ? item[te.key] : YAML::Load(te.default_yaml);
      const std::string k = item_key + "." + te.key;
      if (te.kind == Kind::kInt) {
        test[te.key] = to_int(te, n, iw, k);
      } else if (std::string(te.key) == "file") {
        test[te.key] =
            resolve(from_command_line(v) ? current_dir() : base_dir, to_string(te, n, iw, k));
      } else {
        test[te.key] = to_string(te, n, iw, k);
      }
    }
    if (test["file"].as<std::string>().empty()) {
      error(iw, item_key + ".file", "missing (every test set needs a file)");
    }
    if (test["n_samples"].as<int64_t>() == 0) {
      error(iw, item_key + ".n_samples", "expected -1 (all) or >= 1, got 0");
    }
    out.push_back(test);
  }
  return out;
}

// Whether a plain scalar `text` reads as a bool in YAML 1.1 (yaml-cpp quotes
// the null words itself).
bool reads_as_bool(const std::string& text) {
  static const std::set<std::string> kWords{
      "y",    "Y",    "yes",   "Yes",   "YES",   "n",  "N",  "no", "No",  "NO",  "true",
      "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF"};
  return kWords.count(text) > 0;
}

// The tag resolve_entry puts on such a string; the resolved YAML writes it
// double-quoted instead.
const char* const kStrTag = "tag:yaml.org,2002:str";

// One key's value, checked against its entry, as the resolved YAML holds it.
YAML::Node resolve_entry(const Entry& e, const Located& v, const std::string& origin,
                         const std::string& base_dir) {
  const std::string key = e.key;
  YAML::Node out;
  const auto list = [&](const auto& convert) {
    out = YAML::Node(YAML::NodeType::Sequence);
    for (const auto& item : check_list(e, v.node, v.where, key)) {
      out.push_back(convert(e, item, item_where(v, origin, item), key));
    }
  };
  switch (e.kind) {
    case Kind::kInt:
      out = to_int(e, v.node, v.where, key);
      break;
    case Kind::kFloat:
      out = to_float(e, v.node, v.where, key);
      break;
    case Kind::kBool:
      out = to_bool(v.node, v.where, key);
      break;
    case Kind::kString:
      out = to_string(e, v.node, v.where, key);
      if (key == "data.train_file") {
        out = resolve(from_command_line(v) ? current_dir() : base_dir, out.as<std::string>());
      }
      // YAML 1.1 readers (PyYAML) take a plain on/off/yes/no as a bool: such a
      // string is written quoted, "off".
      if (reads_as_bool(out.as<std::string>())) out.SetTag(kStrTag);
      break;
    case Kind::kIntList:
      list(to_int);
      break;
    case Kind::kFloatList:
      list(to_float);
      break;
    case Kind::kStringList:
      list([](const Entry& en, const YAML::Node& n, const std::string& w, const std::string& k) {
        return to_string(en, n, w, k);
      });
      break;
    case Kind::kTests:
      out = resolve_tests(e, v, origin, base_dir);
      break;
  }
  return out;
}

// The resolved configuration: every key's checked value (defaults filled in),
// by section and name, and where each came from for the checks that follow.
struct Resolved {
  YAML::Node yaml;
  const Values& given;
  std::string origin;

  YAML::Node operator()(const std::string& key) const {
    const auto dot = key.find('.');
    YAML::Node section = yaml[key.substr(0, dot)];
    return section[key.substr(dot + 1)];
  }
  template <typename T>
  T as(const std::string& key) const {
    return (*this)(key).as<T>();
  }
  [[noreturn]] void fail(const std::string& key, const std::string& msg) const {
    error(value_of(given, *find_entry(key), origin).where, key, msg);
  }
};

FNOOptions read_model(const Resolved& r) {
  auto model =
      FNOOptions(r.as<std::vector<int64_t>>("model.n_modes"), r.as<int64_t>("model.in_channels"),
                 r.as<int64_t>("model.out_channels"), r.as<int64_t>("model.hidden_channels"))
          .n_layers(r.as<int64_t>("model.n_layers"))
          .lifting_channel_ratio(r.as<double>("model.lifting_channel_ratio"))
          .projection_channel_ratio(r.as<double>("model.projection_channel_ratio"))
          .positional_embedding(r.as<bool>("model.positional_embedding"))
          .use_channel_mlp(r.as<bool>("model.use_channel_mlp"))
          .single_gelu(r.as<bool>("model.single_gelu"))
          .spectral_init(choice(kSpectralInits, r.as<std::string>("model.spectral_init")))
          .channel_mlp_expansion(r.as<double>("model.channel_mlp_expansion"))
          .domain_padding(r.as<std::vector<double>>("model.domain_padding"))
          .domain_padding_mode(
              choice(kPaddingModes, r.as<std::string>("model.domain_padding_mode")));
  if (model.single_gelu() && model.use_channel_mlp()) {
    r.fail("model.single_gelu",
           "needs model.use_channel_mlp: false (it sets the GELUs between "
           "blocks without channel MLPs)");
  }
  // The spectral weights of a block, hidden^2 x the modes, counted in doubles
  // (they cannot overflow): past 2^53 no size is counted exactly, nor allocated.
  double weights =
      static_cast<double>(model.hidden_channels()) * static_cast<double>(model.hidden_channels());
  for (const int64_t m : model.n_modes()) weights *= static_cast<double>(m);
  if (weights > 9007199254740992.0) {
    std::ostringstream why;
    why << "hidden_channels^2 x the modes' product is " << weights
        << " spectral weights per block, over 2^53: fewer modes or channels";
    r.fail("model.n_modes", why.str());
  }
  const auto pad = model.domain_padding();
  if (!pad.empty() && pad.size() != 1 && pad.size() != model.n_modes().size()) {
    r.fail("model.domain_padding", "needs 0, 1 or " + std::to_string(model.n_modes().size()) +
                                       " entries (one per spatial dim), got " +
                                       std::to_string(pad.size()));
  }
  return model;
}

DataConfig read_data(const Resolved& r) {
  DataConfig d;
  d.train_file = r.as<std::string>("data.train_file");
  if (d.train_file.empty()) r.fail("data.train_file", "missing (the training data file)");
  d.n_train = r.as<int64_t>("data.n_train");
  if (d.n_train == 0) r.fail("data.n_train", "expected -1 (all) or >= 1, got 0");
  d.batch_size = r.as<int64_t>("data.batch_size");
  d.shuffle = r.as<bool>("data.shuffle");
  d.subsample = r.as<int64_t>("data.subsample");
  d.x_key = r.as<std::string>("data.x_key");
  d.y_key = r.as<std::string>("data.y_key");
  d.x_layout = choice(kLayouts, r.as<std::string>("data.x_layout"));
  d.y_layout = choice(kLayouts, r.as<std::string>("data.y_layout"));
  d.encode_input = r.as<bool>("data.encode_input");
  d.encode_output = r.as<bool>("data.encode_output");
  d.normalization = choice(kNormalizations, r.as<std::string>("data.normalization"));
  for (const auto& t : r("data.test")) {
    d.tests.push_back({t["file"].as<std::string>(), t["name"].as<std::string>(),
                       t["n_samples"].as<int64_t>(), t["batch_size"].as<int64_t>()});
  }
  d.n_predictions = r.as<int64_t>("data.n_predictions");
  d.problem = choice(kProblems, r.as<std::string>("data.problem"));
  d.ns_mode = choice(kNsModes, r.as<std::string>("data.ns_mode"));
  d.t_in = r.as<int64_t>("data.t_in");
  d.t_out = r.as<int64_t>("data.t_out");
  if (d.t_out == 0) r.fail("data.t_out", "expected -1 (the rest) or >= 1, got 0");
  return d;
}

// Navier-Stokes across sections: the records are one array (no y_key); the
// recurrent rollout runs the model t_out times per step, so it trains on raw
// records (a prediction becomes an input), under policy none in one piece, and
// its trajectory has an L2 error only.
void check_navier_stokes(const Resolved& r, const RunConfig& c) {
  const auto& d = c.data;
  if (d.problem != DataProblem::kNavierStokes) return;
  for (const char* key : {"data.x_layout", "data.y_layout"}) {
    if (r.as<std::string>(key) != "grid") {
      r.fail(key,
             "not used with data.problem ns (the records (N, R, R, T) give data.t_in "
             "channels), got '" +
                 r.as<std::string>(key) + "'");
    }
  }
  if (!d.y_key.empty()) {
    r.fail("data.y_key",
           "not used with data.problem ns (data.x_key names the records), got '" + d.y_key + "'");
  }
  if (d.ns_mode != NsMode::kRecurrent) return;
  for (const char* key : {"data.encode_input", "data.encode_output"}) {
    if (r.as<bool>(key)) {
      r.fail(key,
             "must be false with data.ns_mode recurrent: the rollout feeds each prediction "
             "back as an input, so it trains on the raw records (as the paper's FNO-2D)");
    }
  }
  if (c.offload.policy.kind != offload::Policy::Kind::kNone) {
    r.fail("offload.policy", "'" + c.offload.policy.text +
                                 "' does not apply to data.ns_mode recurrent (a step runs the "
                                 "model t_out times and backward once through all of them); "
                                 "use none, or data.ns_mode space_time");
  }
  if (c.offload.micro_batches != 1) {
    r.fail("offload.micro_batches",
           "must be 1 with data.ns_mode recurrent (the rollout runs as one piece), got " +
               std::to_string(c.offload.micro_batches));
  }
  for (const auto loss : c.training.eval_losses) {
    if (loss != LossName::kL2) {
      r.fail("training.eval_losses",
             "'" + to_string(loss) +
                 "' is not defined over a rollout's trajectory; use [l2] with data.ns_mode "
                 "recurrent");
    }
  }
}

OptimizerConfig read_optimizer(const Resolved& r) {
  OptimizerConfig o;
  o.name = choice(kOptimizers, r.as<std::string>("optimizer.name"));
  o.lr = r.as<double>("optimizer.lr");
  o.weight_decay = r.as<double>("optimizer.weight_decay");
  const auto betas = r.as<std::vector<double>>("optimizer.betas");
  o.beta1 = betas[0];
  o.beta2 = betas[1];
  o.eps = r.as<double>("optimizer.eps");
  return o;
}

SchedulerConfig read_scheduler(const Resolved& r) {
  SchedulerConfig s;
  s.name = choice(kSchedulers, r.as<std::string>("scheduler.name"));
  s.t_max = r.as<int64_t>("scheduler.T_max");
  s.eta_min = r.as<double>("scheduler.eta_min");
  s.step_size = r.as<int64_t>("scheduler.step_size");
  s.gamma = r.as<double>("scheduler.gamma");
  s.plateau_factor = r.as<double>("scheduler.factor");
  s.plateau_patience = r.as<int64_t>("scheduler.patience");
  return s;
}

TrainingConfig read_training(const Resolved& r) {
  TrainingConfig t;
  t.epochs = r.as<int64_t>("training.epochs");
  t.loss = choice(kLosses, r.as<std::string>("training.loss"));
  t.loss_on = choice(kLossSpaces, r.as<std::string>("training.loss_on"));
  t.eval_losses.clear();
  for (const auto& name : r.as<std::vector<std::string>>("training.eval_losses")) {
    t.eval_losses.push_back(choice(kLosses, name));
  }
  t.eval_every = r.as<int64_t>("training.eval_every");
  t.checkpoint_every = r.as<int64_t>("training.checkpoint_every");
  t.seed = r.as<int64_t>("training.seed");
  t.precision = choice(kPrecisions, r.as<std::string>("training.precision"));
  t.cuda_graphs = parse_cuda_graphs(r.as<std::string>("training.cuda_graphs"));
  t.max_grad_norm = r.as<double>("training.max_grad_norm");
  return t;
}

DeviceConfig read_device(const Resolved& r) {
  DeviceConfig d;
  d.name = r.as<std::string>("device.name");
  const auto& n = d.name;
  if (!(n == "auto" || n == "cpu" || n == "cuda" ||
        (n.rfind("cuda:", 0) == 0 && n.size() > 5 &&
         n.find_first_not_of("0123456789", 5) == std::string::npos))) {
    r.fail("device.name", "unknown value '" + n + "' (expected auto, cpu, cuda or cuda:N)");
  }
  return d;
}

OutputConfig read_output(const Resolved& r) {
  OutputConfig o;
  o.dir = r.as<std::string>("output.dir");
  if (o.dir.empty()) r.fail("output.dir", "must not be empty");
  o.progress = choice(kProgress, r.as<std::string>("output.progress"));
  o.progress_every = r.as<double>("output.progress_every");
  return o;
}

// A memory size ("16GiB"); '' gives 0.
int64_t read_bytes(const Resolved& r, const std::string& key) {
  const auto text = r.as<std::string>(key);
  if (text.empty()) return 0;
  try {
    return offload::parse_bytes(text);
  } catch (const std::invalid_argument& e) {
    r.fail(key, e.what());
  }
}

OffloadConfig read_offload(const Resolved& r) {
  OffloadConfig o;
  try {
    o.policy = offload::parse_policy(r.as<std::string>("offload.policy"));
  } catch (const std::invalid_argument& e) {
    r.fail("offload.policy", e.what());
  }
  o.gpu_memory_limit = read_bytes(r, "offload.gpu_memory_limit");
  o.host_memory_limit = read_bytes(r, "offload.host_memory_limit");
  o.chunks = r.as<int64_t>("offload.chunks");
  o.micro_batches = r.as<int64_t>("offload.micro_batches");
  o.min_bytes = r.as<int64_t>("offload.min_bytes");
  o.prefetch_depth = r.as<int64_t>("offload.prefetch_depth");
  try {
    o.max_inflight_mib = parse_inflight_mib(r.as<std::string>("offload.max_inflight_mib"));
  } catch (const std::invalid_argument& e) {
    r.fail("offload.max_inflight_mib", e.what());
  }
  o.max_prefetch_mib = r.as<int64_t>("offload.max_prefetch_mib");
  o.timeline = r.as<bool>("offload.timeline");
  try {
    o.compress = offload::parse_compress(r.as<std::string>("offload.compress"));
  } catch (const std::invalid_argument& e) {
    r.fail("offload.compress", e.what());
  }
  o.plan_cache = r.as<std::string>("offload.plan_cache");
  return o;
}

// The offload policy against the model: blocks:K names at most its stages
// (the lifting, model.n_layers blocks, the projection).
void check_offload(const Resolved& r, const RunConfig& c) {
  const auto& p = c.offload.policy;
  const int64_t stages = c.model.n_layers() + 2;
  if (p.kind == offload::Policy::Kind::kBlocks && p.blocks > stages) {
    r.fail("offload.policy",
           "'" + p.text + "' names " + std::to_string(p.blocks) + " stages, but the model has " +
               std::to_string(stages) + " (the lifting, model.n_layers " +
               std::to_string(c.model.n_layers()) + " blocks, the projection); use K <= " +
               std::to_string(stages) + " (blocks:" + std::to_string(stages) + " is all)");
  }
}

// A byte count as "3.73 GiB".
std::string gib_text(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3g GiB", static_cast<double>(bytes) / 1073741824.0);
  return buf;
}

// RunConfig::notes: settings given (in the file or by --set, other than their
// defaults) that the chosen offload policy ignores, the byte sizes as read, and
// a training file given on the command line beside the config file's test sets.
std::vector<std::string> notes(const Resolved& r, const RunConfig& c) {
  std::vector<std::string> out;
  // Set to other than the default (a resumed run's config.yaml names every key).
  const auto given = [&](const std::string& key) {
    const YAML::Node def = YAML::Load(find_entry(key)->default_yaml);
    return r.given.count(key) > 0 && r(key).Scalar() != (def.IsScalar() ? def.Scalar() : "");
  };
  using K = offload::Policy::Kind;
  const auto kind = c.offload.policy.kind;
  const std::string policy = "offload.policy " + c.offload.policy.text;
  // What moves activations to host memory, and what plans against a budget.
  const bool moves =
      kind == K::kAll || kind == K::kBlocks || kind == K::kRecomputeOffload || kind == K::kAuto;
  if (!moves) {
    for (const char* key :
         {"offload.host_memory_limit", "offload.min_bytes", "offload.prefetch_depth",
          "offload.max_inflight_mib", "offload.max_prefetch_mib", "offload.compress"}) {
      if (given(key)) {
        out.push_back(std::string(key) + ": ignored by " + policy +
                      " (it moves no activations to host memory)");
      }
    }
  }
  if (kind == K::kAuto) {
    for (const char* key : {"offload.chunks", "offload.micro_batches"}) {
      if (given(key))
        out.push_back(std::string(key) + ": ignored by " + policy + " (it picks its own)");
    }
  } else {
    if (given("offload.plan_cache")) {
      out.push_back("offload.plan_cache: ignored by " + policy + " (only auto plans)");
    }
    if (c.offload.gpu_memory_limit > 0) {
      out.push_back("offload.gpu_memory_limit: " + policy +
                    " plans nothing against it (--offload auto does); it only bounds the data "
                    "kept on the GPU and the out-of-memory advice");
    }
  }
  for (const char* key : {"offload.gpu_memory_limit", "offload.host_memory_limit"}) {
    const auto text = r.as<std::string>(key);
    const int64_t bytes = key == std::string("offload.gpu_memory_limit")
                              ? c.offload.gpu_memory_limit
                              : c.offload.host_memory_limit;
    if (bytes > 0) {
      out.push_back(std::string(key) + ": '" + text + "' is " + std::to_string(bytes) +
                    " bytes = " + gib_text(bytes) + " (GB = 10^9 bytes, GiB = 2^30)");
    }
  }
  // The training file from the command line, the test sets from the file.
  const auto train = value_of(r.given, *find_entry("data.train_file"), r.origin);
  const auto tests = value_of(r.given, *find_entry("data.test"), r.origin);
  if (from_command_line(train) && !from_command_line(tests) && !c.data.tests.empty()) {
    std::string files;
    for (const auto& t : c.data.tests) {
      files += (files.empty() ? "" : ", ") + t.file.substr(t.file.find_last_of('/') + 1);
    }
    out.push_back("data.train_file is set on the command line, but the test sets are still " +
                  r.origin + "'s (" + files +
                  "); set data.test too, e.g. --set 'data.test=[{file: " +
                  "test.h5}]', or --set data.test=[] for none");
  }
  return out;
}

DistributedConfig read_distributed(const Resolved& r) {
  DistributedConfig d;
  d.backend = choice(kBackends, r.as<std::string>("distributed.backend"));
  d.timeout_s = r.as<double>("distributed.timeout_s");
  d.bucket_mib = r.as<double>("distributed.bucket_mib");
  d.domain_parallel = r.as<int64_t>("distributed.domain_parallel");
  return d;
}

// Builds the RunConfig and the resolved YAML from validated values; data file
// paths are resolved against base_dir. Every key is checked in the schema's
// order first, then each section's cross-key checks, in section order.
RunConfig build(const Values& given, const std::string& origin, const std::string& base_dir) {
  Resolved r{YAML::Node(), given, origin};
  for (const auto& e : schema()) {
    const std::string key = e.key;
    const auto dot = key.find('.');
    r.yaml[key.substr(0, dot)][key.substr(dot + 1)] =
        resolve_entry(e, value_of(given, e, origin), origin, base_dir);
  }
  RunConfig cfg;
  cfg.model = read_model(r);
  cfg.data = read_data(r);
  cfg.optimizer = read_optimizer(r);
  cfg.scheduler = read_scheduler(r);
  cfg.training = read_training(r);
  cfg.device = read_device(r);
  cfg.output = read_output(r);
  cfg.offload = read_offload(r);
  cfg.distributed = read_distributed(r);
  check_navier_stokes(r, cfg);
  check_offload(r, cfg);
  cfg.notes = notes(r, cfg);
  YAML::Emitter emitter;
  emitter << r.yaml;
  // yaml-cpp writes a tagged scalar as `!<tag> off`: the strings resolve_entry
  // tagged (plain words) go out double-quoted instead.
  std::string text = emitter.c_str();
  const std::string tagged = std::string("!<") + kStrTag + "> ";
  for (size_t at = text.find(tagged); at != std::string::npos; at = text.find(tagged, at)) {
    const size_t word = at + tagged.size();
    const size_t end = text.find_first_of(" \n,]}", word);
    const size_t len = (end == std::string::npos ? text.size() : end) - word;
    text.replace(at, tagged.size() + len, "\"" + text.substr(word, len) + "\"");
  }
  cfg.resolved_yaml = text + "\n";
  return cfg;
}

}  // namespace

void record_setting(RunConfig& config, const std::string& key, const std::string& value) {
  // The resolved YAML is block style: "section:" at the margin, its keys two spaces in.
  const auto dot = key.find('.');
  const std::string section = key.substr(0, dot) + ":";
  const std::string name = "  " + key.substr(dot + 1) + ": ";
  std::istringstream in(config.resolved_yaml);
  std::string line, out;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != ' ') {
      inside = line == section;
    } else if (inside && line.rfind(name, 0) == 0) {
      line = name + value;
    }
    out += line + "\n";
  }
  config.resolved_yaml = out;
}

int64_t parse_inflight_mib(const std::string& text) {
  if (text == "auto") return 0;
  std::size_t used = 0;
  int64_t mib = 0;
  try {
    mib = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || mib < 1 || mib > (int64_t{1} << 30)) {
    throw std::invalid_argument("expected auto or a whole number of MiB in [1, 2^30], got '" +
                                text + "'");
  }
  return mib;
}

namespace {

RunConfig parse_node(const YAML::Node& root, const std::string& origin,
                     const std::vector<std::string>& overrides, const std::string& base_dir) {
  RunConfig cfg;
  try {
    Values values = read_document(root, origin);
    for (const auto& o : overrides) apply_override(values, o);
    cfg = build(values, origin, base_dir);
  } catch (const YAML::Exception& e) {
    // Anything the checks above did not foresee still ends as a ConfigError.
    throw ConfigError(origin + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  cfg.base_dir = base_dir.empty() ? "." : base_dir;
  return cfg;
}

}  // namespace

RunConfig parse_config(const std::string& yaml, const std::string& origin,
                       const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw ConfigError(origin + ":" + std::to_string(e.mark.line + 1) +
                      ": malformed YAML: " + e.msg);
  }
  return parse_node(root, origin, overrides, /*base_dir=*/"");
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw ConfigError(path + ": cannot read the config file (" +
                      (::stat(path.c_str(), &st) != 0 ? "no such file" : "not a regular file") +
                      ")");
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw ConfigError(path + ": cannot read the config file (missing, a directory, or unreadable)");
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ":" + std::to_string(e.mark.line + 1) + ": malformed YAML: " + e.msg);
  }
  return parse_node(root, path, overrides, absolute_dir(path));
}

std::vector<std::pair<std::string, std::string>> config_keys() {
  std::vector<std::pair<std::string, std::string>> keys;
  // A missing doc (nullptr) reads as empty: the tests then name the key.
  const auto doc = [](const Entry& e) { return std::string(e.doc != nullptr ? e.doc : ""); };
  for (const auto& e : schema()) keys.emplace_back(e.key, doc(e));
  for (const auto& e : test_entries()) {
    keys.emplace_back(std::string("data.test[].") + e.key, doc(e));
  }
  return keys;
}

std::string config_schema_markdown() {
  auto kind_name = [](Kind k) {
    switch (k) {
      case Kind::kInt:
        return "int";
      case Kind::kFloat:
        return "float";
      case Kind::kBool:
        return "bool";
      case Kind::kString:
        return "string";
      case Kind::kIntList:
        return "list of int";
      case Kind::kFloatList:
        return "list of float";
      case Kind::kStringList:
        return "list of string";
      case Kind::kTests:
        return "list of test sets";
    }
    return "";
  };
  auto constraint = [&](const Entry& e) {
    std::string c = range_text(e);
    if (!c.empty()) c = "value" + c;
    if (!e.choices.empty()) {
      c = "one of:";
      for (const auto& x : e.choices) c += " `" + x + "`";
    }
    return c;
  };
  std::ostringstream s;
  s << "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
  for (const auto& e : schema()) {
    s << "| `" << e.key << "` | " << kind_name(e.kind) << " | `" << e.default_yaml << "` | "
      << constraint(e) << " | " << e.doc << " |\n";
  }
  s << "\nEach entry of `data.test`:\n\n| key | type | default | allowed | meaning "
       "|\n|---|---|---|---|---|\n";
  for (const auto& e : test_entries()) {
    s << "| `" << e.key << "` | " << kind_name(e.kind) << " | `" << e.default_yaml << "` | "
      << constraint(e) << " | " << e.doc << " |\n";
  }
  return s.str();
}

}  // namespace fno
