// The config schema: each key declared once (config_builder.h), with its field,
// documentation and checks; its default is the default-constructed config's
// (config.h). The reference (configs/README.md, fno_train --print-schema) and
// the reading of a file (config.cpp) both come from this table.
#include "config_builder.h"

#include <fno_offload/planner.h>

#include <cstring>
#include <sstream>

namespace fno::config {

std::string float_text(double v) {
  char buf[40];
  const double a = std::fabs(v);
  if (a != 0 && a < 1e-2) {
    for (int p = 0; p < 17; ++p) {
      std::snprintf(buf, sizeof(buf), "%.*e", p, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
    const std::string s = buf;
    const auto e = s.find('e');
    std::string mantissa = s.substr(0, e);
    if (mantissa.find('.') == std::string::npos) mantissa += ".0";
    return mantissa + "e" + std::to_string(std::stoi(s.substr(e + 1)));
  }
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof(buf), "%.*g", p, v);  // 300, not 3e+02
    if (std::strtod(buf, nullptr) == v && std::strchr(buf, 'e') == nullptr) break;
  }
  return buf;
}

std::vector<OptimizerName> values_of(OptimizerName) {
  return {OptimizerName::kAdamW, OptimizerName::kAdam};
}
std::vector<SchedulerName> values_of(SchedulerName) {
  return {SchedulerName::kCosine, SchedulerName::kStep, SchedulerName::kPlateau,
          SchedulerName::kNone};
}
std::vector<LossName> values_of(LossName) { return {LossName::kH1, LossName::kL2}; }
std::vector<Precision> values_of(Precision) {
  return {Precision::kFP32, Precision::kTF32, Precision::kBF16, Precision::kFP16};
}
std::vector<dist::Backend> values_of(dist::Backend) {
  return {dist::Backend::kAuto, dist::Backend::kNccl, dist::Backend::kGloo};
}
std::vector<Progress> values_of(Progress) {
  return {Progress::kAuto, Progress::kBar, Progress::kPlain, Progress::kNone};
}
std::vector<DataProblem> values_of(DataProblem) {
  return {DataProblem::kDarcy, DataProblem::kNavierStokes};
}
std::vector<NsMode> values_of(NsMode) { return {NsMode::kSpaceTime, NsMode::kRecurrent}; }
std::vector<DataFormat> values_of(DataFormat) {
  return {DataFormat::kAuto, DataFormat::kWell, DataFormat::kPdeBench, DataFormat::kPdeArena};
}
std::vector<DataStream> values_of(DataStream) {
  return {DataStream::kAuto, DataStream::kOn, DataStream::kOff};
}
std::vector<data::NormalizerMode> values_of(data::NormalizerMode) {
  return {data::NormalizerMode::kChannel, data::NormalizerMode::kPointwise,
          data::NormalizerMode::kBenchmark};
}
std::vector<LossSpace> values_of(LossSpace) {
  return {LossSpace::kNormalized, LossSpace::kDecoded};
}
std::vector<PaddingMode> values_of(PaddingMode) {
  return {PaddingMode::kSymmetric, PaddingMode::kOneSided};
}
std::vector<SpectralInit> values_of(SpectralInit) {
  return {SpectralInit::kNeuralOperator, SpectralInit::kPaper};
}
std::vector<CudaGraphs> values_of(CudaGraphs) {
  return {CudaGraphs::kAuto, CudaGraphs::kOn, CudaGraphs::kOff};
}
std::vector<data::Layout> values_of(data::Layout) {
  return {data::Layout::kGrid, data::Layout::kChannelsFirst, data::Layout::kChannelsLast};
}

TestSetConfig read_test_entry(const YAML::Node& n) {
  TestSetConfig t;
  for (const auto& k : test_keys()) k.read(t, n[k.name]);
  return t;
}

namespace {

// Bounds that keep the counts derived from a key inside 64 bits: steps of an
// epoch and of a run (batch sizes, epochs), bytes of MiB.
constexpr double kMaxCount = 1e9;
constexpr double kMaxMib = 1073741824;  // 2^30 MiB, as offload.max_inflight_mib

// Checks of a value alone beyond its range.
std::function<void(const int64_t&)> not_zero(const std::string& message) {
  return [=](const int64_t& v) {
    if (v == 0) throw std::invalid_argument(message);
  };
}
std::function<void(const std::string&)> not_empty(const std::string& message) {
  return [=](const std::string& v) {
    if (v.empty()) throw std::invalid_argument(message);
  };
}
void device_name(const std::string& n) {
  if (!(n == "auto" || n == "cpu" || n == "cuda" ||
        (n.rfind("cuda:", 0) == 0 && n.size() > 5 &&
         n.find_first_not_of("0123456789", 5) == std::string::npos))) {
    throw std::invalid_argument("unknown value '" + n + "' (expected auto, cpu, cuda or cuda:N)");
  }
}

// The values with their own parsers, and their YAML text.
std::string policy_text(const offload::Policy& p) { return p.text; }
std::string compress_text(const offload::Compress& c) { return offload::to_string(c); }
// A memory size ("16GiB"); '' gives 0, no limit.
int64_t parse_byte_size(const std::string& text) {
  return text.empty() ? 0 : offload::parse_bytes(text);
}
std::string byte_size_text(const int64_t& bytes) {
  return bytes == 0 ? "''" : std::to_string(bytes);
}
std::string inflight_text(const int64_t& mib) { return mib == 0 ? "auto" : std::to_string(mib); }

// model.domain_padding_auto: a run's setting beside the model's options.
Access<RunConfig, double> padding_auto() {
  return {[](const RunConfig& c) { return c.domain_padding_auto; },
          [](RunConfig& c, double v) { c.domain_padding_auto = v; }};
}

// optimizer.betas: two fields as one list.
Access<RunConfig, std::vector<double>> betas() {
  return {[](const RunConfig& c) {
            return std::vector<double>{c.optimizer.beta1, c.optimizer.beta2};
          },
          [](RunConfig& c, std::vector<double> b) {
            c.optimizer.beta1 = b.at(0);
            c.optimizer.beta2 = b.at(1);
          }};
}

}  // namespace

// One key a line; the documentation is the reference's text.
// clang-format off
const std::vector<Key<TestSetConfig>>& test_keys() {
  static const std::vector<Key<TestSetConfig>> kKeys = {
      key("file", entry(&TestSetConfig::file), "data file of the set (.pt, .h5, .mat); relative: to the config file's folder, or, given with --set, to the current directory").path().check(not_empty("missing (every test set needs a file)")),
      key("name", entry(&TestSetConfig::name), "metric prefix (\"32\" gives 32_l2); default: the grid size"),
      key("first", entry(&TestSetConfig::first), "the set's first sample (0-based; not for benchmark formats): with n_samples, samples [first, first + n_samples) of the file, e.g. a validation split after the test samples").min(0).max(kMaxCount),
      key("n_samples", entry(&TestSetConfig::n_samples), "first n samples from `first` (-1: all)").min(-1).check(not_zero("expected -1 (all) or >= 1, got 0")),
      key("batch_size", entry(&TestSetConfig::batch_size), "evaluation batch size").min(1).max(kMaxCount),
      key("split", entry(&TestSetConfig::split), "benchmark formats: the benchmark's split the set reads ('': test; The Well and PDEArena also have valid)"),
  };
  return kKeys;
}

const std::vector<Key<RunConfig>>& schema() {
  // auto's back-pressure window in MiB: offload's default.
  const std::string window = std::to_string(offload::OffloadOptions().max_inflight_bytes() >> 20);
  static const std::vector<Key<RunConfig>> kKeys = {
      // model
      key("model.n_modes", arg(&FNOOptions::n_modes), "Fourier modes kept per spatial dim; its length (1-3) is the dimension").min(1).len(1, 3),
      key("model.in_channels", arg(&FNOOptions::in_channels), "channels of the input function").min(1),
      key("model.out_channels", arg(&FNOOptions::out_channels), "channels of the output function").min(1),
      key("model.hidden_channels", arg(&FNOOptions::hidden_channels), "width of the FNO blocks").min(1),
      key("model.n_layers", arg(&FNOOptions::n_layers), "number of FNO blocks").min(1),
      key("model.lifting_channel_ratio", arg(&FNOOptions::lifting_channel_ratio), "lifting MLP width / hidden_channels (0: one linear layer)").min(0),
      key("model.projection_channel_ratio", arg(&FNOOptions::projection_channel_ratio), "projection MLP width / hidden_channels").above(0),
      key("model.positional_embedding", arg(&FNOOptions::positional_embedding), "append the grid coordinates to the input"),
      key("model.use_channel_mlp", arg(&FNOOptions::use_channel_mlp), "each block ends in a ChannelMLP with a soft-gated skip (neuraloperator's default); false: spectral conv + linear skip and GELU alone, the FNO paper's block (neuraloperator's use_channel_mlp=False, which applies GELU twice between blocks)"),
      key("model.single_gelu", arg(&FNOOptions::single_gelu), "with use_channel_mlp false only: one GELU between blocks, as the FNO paper's scripts (neuraloperator applies two); the state dict is unchanged"),
      key("model.spectral_init", arg(&FNOOptions::spectral_init), "how the blocks' spectral weights start: neuraloperator (complex normal, std sqrt(2 / (2 hidden_channels))) or paper (the FNO paper's scripts: real and imaginary parts uniform on [0, 1 / hidden_channels^2), the bias uniform on +-1 / sqrt(hidden_channels))"),
      key("model.channel_mlp_expansion", arg(&FNOOptions::channel_mlp_expansion), "block ChannelMLP width / hidden_channels").above(0),
      key("model.domain_padding", arg(&FNOOptions::domain_padding), "zero padding as a fraction of each spatial size ([] none, [p] all dims)").min(0).len(0, 3),
      key("model.domain_padding_auto", padding_auto(), "data.format well: when > 0, model.domain_padding from the files' boundary_conditions: 0 along each spatial dim they declare periodic at both ends (the FFT's own periodicity), this fraction along a wall or open one; model.domain_padding must be [] then. fno_train logs the choice, and config.yaml records it as model.domain_padding (and this key as 0), so that fno_predict builds the same model").min(0).sample("0.25"),
      key("model.domain_padding_mode", arg(&FNOOptions::domain_padding_mode), "where the padding goes: symmetric (round(p * size) zeros at both ends, as neuraloperator) or one_sided (at the end alone, as the FNO paper's scripts)"),
      // data
      key("data.train_file", field(&RunConfig::data, &DataConfig::train_file), "training data file (.pt, .h5, .mat); a relative path resolves against the config file's folder, or, given with --set, against the current directory").path().check(not_empty("missing (the training data file)")),
      key("data.n_train", field(&RunConfig::data, &DataConfig::n_train), "first n training samples (-1: all; benchmark formats: trajectories, each giving its windows)").min(-1).check(not_zero("expected -1 (all) or >= 1, got 0")),
      key("data.batch_size", field(&RunConfig::data, &DataConfig::batch_size), "training batch size").min(1).max(kMaxCount),
      key("data.shuffle", field(&RunConfig::data, &DataConfig::shuffle), "reshuffle the training set each epoch (seeded by training.seed)"),
      key("data.subsample", field(&RunConfig::data, &DataConfig::subsample), "keep every k-th grid point of every set").min(1),
      key("data.x_key", field(&RunConfig::data, &DataConfig::x_key), "name of the input array ('' = x in .pt, coeff in HDF5)"),
      key("data.y_key", field(&RunConfig::data, &DataConfig::y_key), "name of the output array ('' = y in .pt, sol in HDF5)"),
      key("data.x_layout", field(&RunConfig::data, &DataConfig::x_layout), "how the input array's dims after the sample dim read: grid ((N, *S): all spatial, one channel), channels_first ((N, C, *S): C channels, e.g. several coefficient fields) or channels_last ((N, *S, C): e.g. records in time as channels); C must equal model.in_channels"),
      key("data.y_layout", field(&RunConfig::data, &DataConfig::y_layout), "the same for the output array; C must equal model.out_channels"),
      key("data.encode_input", field(&RunConfig::data, &DataConfig::encode_input), "normalize inputs to zero mean and unit std over the training set (data.normalization)"),
      key("data.encode_output", field(&RunConfig::data, &DataConfig::encode_output), "normalize outputs the same way for training; metrics use decoded outputs"),
      key("data.normalization", field(&RunConfig::data, &DataConfig::normalization), "the normalizers' statistics: channel (one mean and std per channel, as neuraloperator's UnitGaussianNormalizer, eps 1e-7; benchmark formats: per field over every step of the training split), pointwise (one per channel and grid point over the samples, as the FNO paper's scripts, eps 1e-5) or benchmark (data.format well: the statistics The Well ships, stats.yaml beside data/, per field as the_well's WellDataset(use_normalization=True) applies them: (x - mean) / max(std, 1e-4); scalars as they are)"),
      key("data.test", field(&RunConfig::data, &DataConfig::tests), "evaluation sets: a list of {file, name, n_samples, batch_size}"),
      key("data.n_predictions", field(&RunConfig::data, &DataConfig::n_predictions), "test samples per set saved to predictions.h5").min(0),
      key("data.problem", field(&RunConfig::data, &DataConfig::problem), "what the files hold: darcy (input and output arrays, data.x_key and data.y_key; also Poisson 3D) or ns (Navier-Stokes records u (N, R, R, T) of fno_datagen --problem ns, read by data.x_key, '' = u; docs/data.md)"),
      key("data.ns_mode", field(&RunConfig::data, &DataConfig::ns_mode), "ns: space_time (a 3D FNO over x, y, t: the t_in records as channels in, the next t_out records out at once) or recurrent (a 2D FNO from the last t_in records to the next, rolled out t_out times, the loss summed over the rollout; offload.policy none only, no normalization)"),
      key("data.t_in", field(&RunConfig::data, &DataConfig::t_in), "ns: records given as input (= model.in_channels)").min(1),
      key("data.t_out", field(&RunConfig::data, &DataConfig::t_out), "ns: records predicted after them (-1: the rest of the training file's records)").min(-1).check(not_zero("expected -1 (the rest) or >= 1, got 0")),
      key("data.format", field(&RunConfig::data, &DataConfig::format), "the files' layout: auto (the loaders' own detection: .pt, HDF5 arrays, .mat; data.problem) or a benchmark's files as they ship, trained as next-step pairs from a time window: well (The Well: data.train_file the data set's folder holding data/<split>/, a split folder or a file), pdebench (one PDEBench file) or pdearena (a PDEArena file, or a folder of them); docs/data.md"),
      key("data.split", field(&RunConfig::data, &DataConfig::split), "benchmark formats: the benchmark's split that trains (The Well's data/<split>/, PDEArena's group, PDEBench's train/test convention)").check(not_empty("missing (a split name, e.g. train)")),
      key("data.fields", field(&RunConfig::data, &DataConfig::fields), "benchmark formats: the input fields by name, in channel order ([]: every field of the files); channels: data.history steps of the time-varying ones, then the constant ones once").sample("[density]"),
      key("data.target_fields", field(&RunConfig::data, &DataConfig::target_fields), "benchmark formats: the fields predicted ([]: the time-varying input fields); model.out_channels = data.horizon x their channels").sample("[density]"),
      key("data.history", field(&RunConfig::data, &DataConfig::history), "benchmark formats: consecutive steps given as input (The Well's baselines: 4)").min(1).max(kMaxCount),
      key("data.horizon", field(&RunConfig::data, &DataConfig::horizon), "benchmark formats: the steps after them predicted as output channels").min(1).max(kMaxCount),
      key("data.scalars", field(&RunConfig::data, &DataConfig::scalars), "benchmark formats: scalars given as inputs by name (The Well's scalars/, e.g. a Reynolds number, constant in time; PDEArena's buo_y), each a channel of its value over the grid, after the fields' channels (model.in_channels counts them)").sample("[gamma]"),
      key("data.stream", field(&RunConfig::data, &DataConfig::stream), "benchmark formats: off (the training split's windows kept in memory), on (read from the files batch by batch by hyperslab, on one I/O thread that reads the next batches ahead, into pinned memory on a GPU: a split larger than host memory trains) or auto (on when the windows exceed data.host_memory_limit; says so in one line)").sample("off"),
      key("data.host_memory_limit", field(&RunConfig::data, &DataConfig::host_memory_limit), "benchmark formats: host memory the training split's windows may take before data.stream auto streams them, e.g. 64GiB (units as offload.gpu_memory_limit; '': half of the memory available at the start)").parsed(parse_byte_size, byte_size_text).sample("1GiB"),
      // optimizer
      key("optimizer.name", field(&RunConfig::optimizer, &OptimizerConfig::name), "optimizer: adamw (neuraloperator's AdamW: decoupled weight decay) or adam (torch.optim.Adam, the FNO paper's: weight decay as an L2 term in the gradient, eps added to the bias-corrected sqrt(v), complex weights as real pairs)"),
      key("optimizer.lr", field(&RunConfig::optimizer, &OptimizerConfig::lr), "learning rate").above(0),
      key("optimizer.weight_decay", field(&RunConfig::optimizer, &OptimizerConfig::weight_decay), "weight decay: adamw's decoupled decay, adam's L2 term").min(0),
      key("optimizer.betas", betas(), "moment decay rates").min(0).below(1).len(2, 2),
      key("optimizer.eps", field(&RunConfig::optimizer, &OptimizerConfig::eps), "added to sqrt(second moment) (neuraloperator's default; torch.optim.Adam's is 1e-8)").min(0),
      // scheduler
      key("scheduler.name", field(&RunConfig::scheduler, &SchedulerConfig::name), "lr schedule, stepped once per epoch"),
      key("scheduler.T_max", field(&RunConfig::scheduler, &SchedulerConfig::t_max), "cosine: epochs of a half period").min(1),
      key("scheduler.eta_min", field(&RunConfig::scheduler, &SchedulerConfig::eta_min), "cosine: lowest lr").min(0),
      key("scheduler.step_size", field(&RunConfig::scheduler, &SchedulerConfig::step_size), "step: epochs between decays").min(1),
      key("scheduler.gamma", field(&RunConfig::scheduler, &SchedulerConfig::gamma), "step: decay factor").above(0),
      key("scheduler.factor", field(&RunConfig::scheduler, &SchedulerConfig::plateau_factor), "plateau: decay factor when the training loss stalls").above(0).below(1),
      key("scheduler.patience", field(&RunConfig::scheduler, &SchedulerConfig::plateau_patience), "plateau: epochs without improvement before decaying").min(0),
      // training
      key("training.epochs", field(&RunConfig::training, &TrainingConfig::epochs), "number of epochs").min(1).max(kMaxCount),
      key("training.loss", field(&RunConfig::training, &TrainingConfig::loss), "training loss (relative, summed over the batch)"),
      key("training.loss_on", field(&RunConfig::training, &TrainingConfig::loss_on), "with data.encode_output, what the training loss compares: normalized (the normalized output and truth, as neuraloperator's Trainer) or decoded (both decoded, as the FNO paper's scripts)"),
      key("training.eval_losses", field(&RunConfig::training, &TrainingConfig::eval_losses), "evaluation metrics (mean per-sample relative error)").len(1, 2),
      key("training.eval_every", field(&RunConfig::training, &TrainingConfig::eval_every), "evaluate every n epochs (and after the last)").min(1),
      key("training.checkpoint_every", field(&RunConfig::training, &TrainingConfig::checkpoint_every), "write the latest checkpoint every n epochs (and after the last)").min(1),
      key("training.seed", field(&RunConfig::training, &TrainingConfig::seed), "seed of the model initialization and the shuffling").min(0),
      key("training.max_grad_norm", field(&RunConfig::training, &TrainingConfig::max_grad_norm), "clip the gradients to this total 2-norm before each optimizer step, as torch.nn.utils.clip_grad_norm_ (after the sum over ranks and fp16's unscaling), and log the norm before clipping per epoch (grad_norm: mean, grad_norm_max) in metrics.jsonl; 0: off. A value above every norm (1e30) logs without clipping").min(0),
      key("training.precision", field(&RunConfig::training, &TrainingConfig::precision), "compute precision: fp32, tf32 (fp32 GEMMs on TF32 tensor cores), bf16 or fp16 (activations, saved tensors and GEMM inputs in that type, fp32 accumulation; fp16 adds a dynamic loss scaler that skips steps with non-finite gradients). Weights, optimizer state, losses and state dicts stay fp32. One step against fp32, relative: bf16 output 4e-3, gradients 1e-2; fp16 5e-4 and 8e-4"),
      key("training.cuda_graphs", field(&RunConfig::training, &TrainingConfig::cuda_graphs), "run each training step (forward, loss, backward, fp16's loss scaler, AdamW) and each evaluation batch as one CUDA graph per batch shape, replayed instead of launching its kernels one by one: auto (where graphs work: a CUDA device, offload.policy none with one micro-batch, one rank or several on NCCL, a step split across ranks by distributed.domain_parallel excepted (auto runs it eagerly; on is refused there); else eager steps, with a line saying why for an offload policy or several ranks on Gloo; a batch shape whose step takes over 50 ms, bound by its kernels rather than their launches, runs eagerly with a line), on (the same without the 50-ms limit, with a line whenever graphs cannot be used) or off (eager steps); a shape whose capture runs out of GPU memory runs eagerly, with a line. The metrics equal off's: the same kernels, and AdamW's step computed on the device in the host's order"),
      // device
      key("device.name", field(&RunConfig::device, &DeviceConfig::name), "auto (CUDA when available), cpu, cuda or cuda:N").check(device_name).sample("cpu"),
      // distributed
      key("distributed.backend", field(&RunConfig::distributed, &DistributedConfig::backend), "c10d backend when launched by torchrun: auto (NCCL on CUDA, Gloo on the CPU), nccl or gloo"),
      key("distributed.timeout_s", field(&RunConfig::distributed, &DistributedConfig::timeout_s), "seconds a rank waits for the others (rendezvous, each collective) before it stops with an error").above(0),
      key("distributed.bucket_mib", field(&RunConfig::distributed, &DistributedConfig::bucket_mib), "MiB of gradients per all-reduce bucket; a bucket is reduced as soon as backward has produced it").above(0),
      key("distributed.domain_parallel", field(&RunConfig::distributed, &DistributedConfig::domain_parallel), "ranks that share one sample, each a band of rows of the first spatial dim (a 2D or 3D model; under offload.policy none each band steps whole with its activations kept, under the others in a plan of tiles, docs/domain_parallel.md; the spectra are summed over them); it divides the world size, the rest is data parallel").min(1).max(kMaxCount),
      // offload
      key("offload.policy", field(&RunConfig::offload, &OffloadConfig::policy), "activation memory policy: none (nothing moves; on CUDA with the fused kernels, blocks and MLPs store only their inputs and recompute the rest, as slim), slim (recompute cheap activations), all, blocks:K (first K stages, lifting first; the model has model.n_layers + 2 stages), recompute, recompute+offload, auto (fits offload.gpu_memory_limit). Without a CUDA device nothing is offloaded: all and blocks:K run as none, recompute+offload as recompute, auto as none, with a line saying so, and config.yaml records the policy that ran").parsed(offload::parse_policy, policy_text).sample("all"),
      key("offload.gpu_memory_limit", field(&RunConfig::offload, &OffloadConfig::gpu_memory_limit), "GPU memory budget for auto, e.g. 16GiB (16 x 2^30 bytes) or 8GB (8 x 10^9 bytes): kB, MB, GB, TB are powers of 1000, KiB, MiB, GiB, TiB (and K, M, G, T) powers of 1024 ('': the device's free memory). The other policies plan nothing against it; it also bounds the data kept on the GPU, the out-of-memory advice, and the evaluation's forward at a test grid other than the training one").parsed(parse_byte_size, byte_size_text).sample("8GiB"),
      key("offload.chunks", field(&RunConfig::offload, &OffloadConfig::chunks), "batch chunks per stage for the fixed policies (lowers the transient peak)").min(1),
      key("offload.micro_batches", field(&RunConfig::offload, &OffloadConfig::micro_batches), "run each step as this many micro-batches whose gradients add up (the fixed policies; auto picks its own)").min(1),
      key("offload.min_bytes", field(&RunConfig::offload, &OffloadConfig::min_bytes), "saved tensors smaller than this stay on the GPU").min(0),
      key("offload.prefetch_depth", field(&RunConfig::offload, &OffloadConfig::prefetch_depth), "backward prefetches this many stages ahead").min(0),
      key("offload.max_inflight_mib", field(&RunConfig::offload, &OffloadConfig::max_inflight_mib), "device-to-host MiB in flight before forward waits (the back-pressure window, held in GPU memory), or auto: the fixed policies start at " + window + " and, after a step whose forward waited on the link, grow it by what the link drained meanwhile, within offload.gpu_memory_limit or 90% of the GPU memory; auto policy plans keep " + window).parsed(parse_inflight_mib, inflight_text).sample("2048"),
      key("offload.max_prefetch_mib", field(&RunConfig::offload, &OffloadConfig::max_prefetch_mib), "prefetched, not yet used MiB at most").min(1).max(kMaxMib),
      key("offload.host_memory_limit", field(&RunConfig::offload, &OffloadConfig::host_memory_limit), "pinned host memory at most, e.g. 64GiB ('': no limit; units as offload.gpu_memory_limit); beyond it activations stay on the GPU").parsed(parse_byte_size, byte_size_text).sample("1GiB"),
      key("offload.timeline", field(&RunConfig::offload, &OffloadConfig::timeline), "write memory_timeline.csv: the GPU memory of one training step"),
      key("offload.compress", field(&RunConfig::offload, &OffloadConfig::compress), "host storage of offloaded float32 activations: none (lossless) or bf16 (half the PCIe bytes; rounded to bfloat16)").parsed(offload::parse_compress, compress_text).sample("bf16"),
      key("offload.plan_cache", field(&RunConfig::offload, &OffloadConfig::plan_cache), "directory where auto keeps its chosen plans for reuse by later runs ('': $FNO_PLAN_CACHE, else ~/.cache/fno/plans; none: no cache)"),
      key("offload.search_seconds", field(&RunConfig::offload, &OffloadConfig::search_seconds), "seconds auto's measured plan search may take, its profile included: no trial starts that is estimated to end after them, and the search takes the fastest plan it measured within the budget (none: the plan estimated fastest among those estimated to fit, unmeasured, with a line saying so). The plan's description then says the search was cut and after how many trials, and offload.plan_cache does not keep it. 0: no trial step (the estimated plan); a large value, e.g. 1e9: no cap in effect").min(0).sample("5"),
      // output
      key("output.dir", field(&RunConfig::output, &OutputConfig::dir), "run directory (relative to the working directory); --out overrides").check(not_empty("must not be empty")),
      key("output.progress", field(&RunConfig::output, &OutputConfig::progress), "progress display on stderr: auto (a bar on a terminal, else plain), bar (redrawn as batches finish, with samples/s and the epoch's time left), plain (a line per epoch, and within an epoch longer than output.progress_every / 2 seconds a line every output.progress_every seconds with samples/s and the time left), or none"),
      key("output.progress_every", field(&RunConfig::output, &OutputConfig::progress_every), "plain progress: seconds between the lines within an epoch (the first after half of it)").above(0),
  };
  return kKeys;
}
// clang-format on

const Key<RunConfig>* find_key(const std::string& name) {
  for (const auto& k : schema()) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

namespace {

const char* kind_name(Kind k) {
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
}

// The reference's row of a key.
std::string row(const KeySpec& k) {
  std::string allowed = k.range_text();
  if (!allowed.empty()) allowed = "value" + allowed;
  if (!k.choices.empty()) {
    allowed = "one of:";
    for (const auto& c : k.choices) allowed += " `" + c + "`";
  }
  return "| `" + k.name + "` | " + kind_name(k.kind) + " | `" + k.default_yaml + "` | " + allowed +
         " | " + k.doc + " |\n";
}

}  // namespace

}  // namespace fno::config

namespace fno {

std::vector<ConfigKey> config_keys() {
  std::vector<ConfigKey> keys;
  for (const auto& k : config::schema()) keys.push_back({k.name, k.doc, k.sample});
  for (const auto& k : config::test_keys()) {
    keys.push_back({"data.test[]." + k.name, k.doc, k.sample});
  }
  return keys;
}

std::string config_schema_markdown() {
  std::ostringstream s;
  s << "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
  for (const auto& k : config::schema()) s << config::row(k);
  s << "\nEach entry of `data.test`:\n\n| key | type | default | allowed | meaning "
       "|\n|---|---|---|---|---|\n";
  for (const auto& k : config::test_keys()) s << config::row(k);
  return s.str();
}

}  // namespace fno
