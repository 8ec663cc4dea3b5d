// BenchmarkSet: windows of benchmark trajectories (fno_data/benchmark.h); the
// layouts' catalogs are in well.cpp, pdebench.cpp and pdearena.cpp.
#include <fno_data/benchmark.h>

#include <torch/torch.h>

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <stdexcept>

#include "benchmark_internal.h"

namespace fno::data {

std::string to_string(BenchmarkFormat format) {
  switch (format) {
    case BenchmarkFormat::kWell:
      return "well";
    case BenchmarkFormat::kPdeBench:
      return "pdebench";
    case BenchmarkFormat::kPdeArena:
      return "pdearena";
  }
  return "?";
}

std::string to_string(BoundaryKind kind) {
  switch (kind) {
    case BoundaryKind::kWall:
      return "WALL";
    case BoundaryKind::kOpen:
      return "OPEN";
    case BoundaryKind::kPeriodic:
      return "PERIODIC";
  }
  return "?";
}

namespace bench {

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> list_h5_files(const std::string& dir, const std::string& contains) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const auto ends = [&](const std::string& s) {
      return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (!ends(".h5") && !ends(".hdf5")) continue;
    if (!contains.empty() && name.find(contains) == std::string::npos) continue;
    out.push_back(dir + (dir.back() == '/' ? "" : "/") + name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return names.empty() ? std::string("none") : s;
}

bool wanted(const std::vector<std::string>& wanted_fields, const std::string& name) {
  return wanted_fields.empty() ||
         std::find(wanted_fields.begin(), wanted_fields.end(), name) != wanted_fields.end();
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string t = "(";
  for (size_t i = 0; i < shape.size(); ++i) t += (i ? ", " : "") + std::to_string(shape[i]);
  return t + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace bench

using bench::Axis;

struct BenchmarkSet::Impl {
  BenchmarkOptions options;
  bench::Catalog cat;
  std::vector<size_t> in_tv, in_const, out;  // indices into cat.fields
  std::vector<std::string> in_channels, out_channels;
  std::vector<int64_t> grid;               // after subsampling
  int64_t row0 = 0, rows = -1;             // select_rows (-1: every row)
  std::vector<int64_t> window_offsets{0};  // per trajectory, prefix sums
  int64_t min_steps = 0;

  [[noreturn]] void fail(const std::string& file, const std::string& message) const {
    throw std::runtime_error(file + ": " + message);
  }
  void choose_fields(const std::string& path);
  void check_windows();
  // The grid read: the whole one, or (band, after select_rows) its rows.
  std::vector<int64_t> read_grid(bool band) const {
    auto g = grid;
    if (band && rows >= 0) g[0] = rows;
    return g;
  }
  // Field f of trajectory n, steps [t0, t1), of read_grid(band): [t1 - t0, C_f, *S].
  torch::Tensor read_field(int64_t n, size_t f, int64_t t0, int64_t t1, bool band) const;
  torch::Tensor read(int64_t n, const std::vector<size_t>& fields, int64_t t0, int64_t t1,
                     bool band = true) const;
  // Trajectory n's chosen scalars, each broadcast over the grid: [n_scalars, *S].
  torch::Tensor read_scalars(int64_t n) const;
  std::pair<torch::Tensor, torch::Tensor> stats(const std::vector<size_t>& fields) const;
  std::pair<torch::Tensor, torch::Tensor> scalar_stats() const;
  std::pair<torch::Tensor, torch::Tensor> shipped(const std::vector<size_t>& fields,
                                                  bool scalars) const;
};

void BenchmarkSet::Impl::choose_fields(const std::string& path) {
  const auto& o = options;
  std::vector<std::string> names;
  for (const auto& f : cat.fields) names.push_back(f.name);
  const std::string& file = cat.files.empty() ? path : cat.files.front();
  auto index = [&](const std::string& name, const char* setting) {
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
      fail(file,
           std::string(setting) + ": no field '" + name + "' (found: " + bench::join(names) + ")");
    }
    return static_cast<size_t>(it - names.begin());
  };
  std::vector<size_t> inputs;
  if (o.fields().empty()) {
    for (size_t i = 0; i < names.size(); ++i) inputs.push_back(i);
  } else {
    for (const auto& n : o.fields()) inputs.push_back(index(n, "data.fields"));
  }
  for (size_t i : inputs) (cat.fields[i].time_varying ? in_tv : in_const).push_back(i);
  if (o.target_fields().empty()) {
    out = in_tv;
  } else {
    for (const auto& n : o.target_fields()) {
      const size_t i = index(n, "data.target_fields");
      if (!cat.fields[i].time_varying) {
        fail(file, "data.target_fields: field '" + n +
                       "' is constant in time (time_varying false), so it cannot be a target");
      }
      out.push_back(i);
    }
  }
  if (in_tv.empty()) fail(file, "data.fields: none of the chosen fields varies in time");
  if (out.empty()) fail(file, "data.target_fields: no target field");
  for (size_t i : in_tv)
    for (const auto& c : cat.fields[i].channels) in_channels.push_back(c);
  for (size_t i : in_const)
    for (const auto& c : cat.fields[i].channels) in_channels.push_back(c);
  for (const auto& name : o.scalars()) in_channels.push_back(name);
  for (size_t i : out)
    for (const auto& c : cat.fields[i].channels) out_channels.push_back(c);
  // Every chosen field must be there in every unit.
  for (const auto& u : cat.units) {
    for (const auto* list : {&inputs, &out}) {
      for (size_t i : *list) {
        if (!u.arrays[i]) {
          fail(u.file, "no field '" + cat.fields[i].name + "'" +
                           (u.where.empty() ? "" : " in '" + u.where + "'"));
        }
      }
    }
  }
}

void BenchmarkSet::Impl::check_windows() {
  const int64_t need = options.history() + options.horizon();
  min_steps = -1;
  for (const auto& [u, s] : cat.trajectories) {
    const auto& unit = cat.units[u];
    if (unit.n_steps < need) {
      const auto& key = unit.arrays[in_tv.front()]->reader->key();
      fail(unit.file, "dataset '" + key + "' holds " + std::to_string(unit.n_steps) +
                          " time steps, fewer than data.history " +
                          std::to_string(options.history()) + " + data.horizon " +
                          std::to_string(options.horizon()));
    }
    min_steps = min_steps < 0 ? unit.n_steps : std::min(min_steps, unit.n_steps);
    window_offsets.push_back(window_offsets.back() + unit.n_steps - need + 1);
  }
}

torch::Tensor BenchmarkSet::Impl::read_field(int64_t n, size_t f, int64_t t0, int64_t t1,
                                             bool band) const {
  const auto& [u, sample] = cat.trajectories[static_cast<size_t>(n)];
  const auto& a = *cat.units[u].arrays[f];
  const auto& shape = a.reader->shape();
  const int64_t k = options.subsample();
  std::vector<int64_t> start(shape.size(), 0), count(shape), stride(shape.size(), 1);
  std::vector<int64_t> keep;  // the dims kept, in order: time, space, components
  int64_t time_dim = -1;
  std::vector<int64_t> space_dims, comp_dims;
  for (size_t d = 0; d < shape.size(); ++d) {
    switch (a.axes[d]) {
      case Axis::kSample:
        start[d] = sample;
        count[d] = 1;
        break;
      case Axis::kTime:
        start[d] = t0;
        count[d] = t1 - t0;
        time_dim = static_cast<int64_t>(d);
        break;
      case Axis::kSpace:
        stride[d] = k;
        count[d] = (shape[d] + k - 1) / k;
        // (select_rows: the first grid dim's rows alone, where the array varies along it)
        if (band && rows >= 0 && space_dims.empty() && a.space_varying[0]) {
          start[d] = row0 * k;
          count[d] = rows;
        }
        space_dims.push_back(static_cast<int64_t>(d));
        break;
      case Axis::kComponent:
        comp_dims.push_back(static_cast<int64_t>(d));
        break;
    }
  }
  torch::Tensor v = a.reader->read_box(start, count, stride);
  std::vector<int64_t> order;
  if (time_dim >= 0) order.push_back(time_dim);
  order.insert(order.end(), space_dims.begin(), space_dims.end());
  order.insert(order.end(), comp_dims.begin(), comp_dims.end());
  // Sample dims (size 1) go last and are dropped.
  for (size_t d = 0; d < shape.size(); ++d) {
    if (a.axes[d] == Axis::kSample) order.push_back(static_cast<int64_t>(d));
  }
  v = v.permute(order);
  // Drop the sample dims: v [T?, S_stored..., components...].
  const int64_t kept =
      static_cast<int64_t>((time_dim >= 0 ? 1 : 0) + space_dims.size() + comp_dims.size());
  v = v.reshape(std::vector<int64_t>(v.sizes().begin(), v.sizes().begin() + kept));
  if (time_dim < 0) v = v.unsqueeze(0);  // broadcast over the steps below
  // The grid dims the array does not vary along are broadcast.
  const int64_t n_space = static_cast<int64_t>(grid.size());
  for (int64_t g = 0; g < n_space; ++g) {
    if (!a.space_varying[static_cast<size_t>(g)]) v = v.unsqueeze(1 + g);
  }
  const auto g_read = read_grid(band);
  std::vector<int64_t> full{t1 - t0};
  full.insert(full.end(), g_read.begin(), g_read.end());
  int64_t channels = 1;
  for (int64_t d = 1 + n_space; d < v.dim(); ++d) {
    full.push_back(v.size(d));
    channels *= v.size(d);
  }
  std::vector<int64_t> flat(full.begin(), full.begin() + 1 + n_space);
  flat.push_back(channels);
  // [T, *S, components...] -> [T, *S, C] -> [T, C, *S]
  v = v.expand(full).reshape(flat);
  std::vector<int64_t> to_channels_first{0, 1 + n_space};
  for (int64_t g = 0; g < n_space; ++g) to_channels_first.push_back(1 + g);
  return v.permute(to_channels_first).contiguous();
}

torch::Tensor BenchmarkSet::Impl::read(int64_t n, const std::vector<size_t>& fields, int64_t t0,
                                       int64_t t1, bool band) const {
  std::vector<torch::Tensor> parts;
  for (size_t f : fields) parts.push_back(read_field(n, f, t0, t1, band));
  if (parts.empty()) {
    const auto g_read = read_grid(band);
    std::vector<int64_t> empty{t1 - t0, 0};
    empty.insert(empty.end(), g_read.begin(), g_read.end());
    return torch::zeros(empty);
  }
  return torch::cat(parts, 1);
}

torch::Tensor BenchmarkSet::Impl::read_scalars(int64_t n) const {
  const auto& [u, sample] = cat.trajectories[static_cast<size_t>(n)];
  const auto& values = cat.units[u].scalars;
  const auto g_read = read_grid(true);
  std::vector<int64_t> shape{static_cast<int64_t>(values.size())};
  shape.insert(shape.end(), g_read.begin(), g_read.end());
  auto out = torch::empty(shape);
  for (size_t k = 0; k < values.size(); ++k) {
    const auto& v = values[k];
    out[static_cast<int64_t>(k)].fill_(v.size() == 1 ? v[0] : v[static_cast<size_t>(sample)]);
  }
  return out;
}

// The scalars' channels, each value counted T * |S| times per trajectory as a
// field constant in time is (stats()).
std::pair<torch::Tensor, torch::Tensor> BenchmarkSet::Impl::scalar_stats() const {
  const auto k = static_cast<int64_t>(options.scalars().size());
  auto sum = torch::zeros({k}, torch::kDouble), sq = torch::zeros({k}, torch::kDouble);
  double count = 0, points = 1;
  for (int64_t g : grid) points *= static_cast<double>(g);
  for (int64_t n = 0; n < static_cast<int64_t>(cat.trajectories.size()); ++n) {
    const size_t u = cat.trajectories[static_cast<size_t>(n)].first;
    const double w = static_cast<double>(cat.units[u].n_steps) * points;
    const auto v = read_scalars(n).flatten(1).select(1, 0).to(torch::kDouble);  // [k]
    sum += w * v;
    sq += w * v * v;
    count += w;
  }
  const auto mean = sum / count;
  const auto var = (sq - count * mean * mean) / std::max(count - 1, 1.0);
  return {mean.to(torch::kFloat), var.clamp_min(0).sqrt().to(torch::kFloat)};
}

std::pair<torch::Tensor, torch::Tensor> BenchmarkSet::Impl::stats(
    const std::vector<size_t>& fields) const {
  torch::Tensor sum, sq;
  double count = 0;
  for (int64_t n = 0; n < static_cast<int64_t>(cat.trajectories.size()); ++n) {
    const auto& unit = cat.units[cat.trajectories[static_cast<size_t>(n)].first];
    // A field constant in time is broadcast over the T steps, so that every
    // channel counts T * |S| values per trajectory.
    // read: [T, C, *S] -> [C, T * |S|]
    const auto v =
        read(n, fields, 0, unit.n_steps, false).to(torch::kDouble).transpose(0, 1).flatten(1);
    if (!sum.defined()) {
      sum = v.sum(1);
      sq = (v * v).sum(1);
    } else {
      sum += v.sum(1);
      sq += (v * v).sum(1);
    }
    count += static_cast<double>(v.size(1));
  }
  const auto mean = sum / count;
  const auto var = (sq - count * mean * mean) / std::max(count - 1, 1.0);
  return {mean.to(torch::kFloat), var.clamp_min(0).sqrt().to(torch::kFloat)};
}

std::pair<torch::Tensor, torch::Tensor> BenchmarkSet::Impl::shipped(
    const std::vector<size_t>& fields, bool scalars) const {
  if (cat.stats_file.empty()) {
    const std::string where = cat.files.empty() ? std::string("the files") : cat.files.front();
    if (options.format() != BenchmarkFormat::kWell) {
      throw std::runtime_error(where +
                               ": data.normalization benchmark: " + to_string(options.format()) +
                               " ships no statistics (The Well's stats.yaml); use channel");
    }
    throw std::runtime_error(where + ": data.normalization benchmark: no stats.yaml in " +
                             bench::join(cat.stats_searched));
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> named;
  for (size_t f : fields) named.emplace_back(cat.fields[f].name, cat.fields[f].channels);
  // the_well 1.2.0's ZScoreNormalization clips the std at min_denom 1e-4.
  auto [mean, sd] = bench::read_stats(cat.stats_file, named, 1e-4);
  if (scalars) {  // The Well leaves scalars as they are.
    mean.resize(mean.size() + options.scalars().size(), 0.0);
    sd.resize(sd.size() + options.scalars().size(), 1.0);
  }
  const auto to_tensor = [](const std::vector<double>& v) {
    return torch::tensor(v, torch::kDouble).to(torch::kFloat);
  };
  return {to_tensor(mean), to_tensor(sd)};
}

BenchmarkSet::BenchmarkSet(const std::string& path, const BenchmarkOptions& options)
    : p_(std::make_unique<Impl>()) {
  auto& m = *p_;
  m.options = options;
  auto fail = [&](const std::string& what) { m.fail(path, what); };
  if (options.history() < 1)
    fail("data.history must be >= 1, got " + std::to_string(options.history()));
  if (options.horizon() < 1)
    fail("data.horizon must be >= 1, got " + std::to_string(options.horizon()));
  if (options.subsample() < 1) fail("data.subsample must be >= 1");
  for (size_t i = 0; i < options.scalars().size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (options.scalars()[i] == options.scalars()[j])
        fail("data.scalars: '" + options.scalars()[i] + "' named twice");
    }
  }
  std::vector<std::string> wanted = options.fields();
  if (!wanted.empty()) {
    wanted.insert(wanted.end(), options.target_fields().begin(), options.target_fields().end());
  }
  switch (options.format()) {
    case BenchmarkFormat::kWell:
      m.cat = bench::well_catalog(path, options, wanted);
      break;
    case BenchmarkFormat::kPdeBench:
      m.cat = bench::pdebench_catalog(path, options, wanted);
      break;
    case BenchmarkFormat::kPdeArena:
      m.cat = bench::pdearena_catalog(path, options, wanted);
      break;
  }
  if (options.n_trajectories() >= 0 &&
      static_cast<size_t>(options.n_trajectories()) < m.cat.trajectories.size()) {
    m.cat.trajectories.resize(static_cast<size_t>(options.n_trajectories()));
  }
  if (m.cat.trajectories.empty()) {
    fail("split '" + options.split() + "' holds no trajectories");
  }
  for (int64_t g : m.cat.grid)
    m.grid.push_back((g + options.subsample() - 1) / options.subsample());
  m.choose_fields(path);
  m.check_windows();
}

BenchmarkSet::~BenchmarkSet() = default;

const BenchmarkOptions& BenchmarkSet::options() const { return p_->options; }
const std::vector<std::string>& BenchmarkSet::files() const { return p_->cat.files; }
int64_t BenchmarkSet::n_trajectories() const {
  return static_cast<int64_t>(p_->cat.trajectories.size());
}
int64_t BenchmarkSet::n_steps() const { return p_->min_steps; }
int64_t BenchmarkSet::n_windows() const { return p_->window_offsets.back(); }
const std::vector<int64_t>& BenchmarkSet::grid() const { return p_->grid; }

std::vector<int64_t> BenchmarkSet::read_grid() const { return p_->read_grid(true); }

void BenchmarkSet::select_rows(int64_t row0, int64_t rows) {
  const int64_t r = p_->grid[0];
  if (row0 < 0 || rows < 1 || row0 + rows > r) {
    throw std::runtime_error(
        (p_->cat.files.empty() ? std::string("benchmark set") : p_->cat.files.front()) +
        ": rows [" + std::to_string(row0) + ", " + std::to_string(row0 + rows) +
        ") are not within the grid's " + std::to_string(r));
  }
  p_->row0 = row0;
  p_->rows = rows;
}
const std::vector<std::string>& BenchmarkSet::input_field_channels() const {
  return p_->in_channels;
}
const std::vector<std::string>& BenchmarkSet::target_field_channels() const {
  return p_->out_channels;
}
int64_t BenchmarkSet::n_scalar_inputs() const {
  return static_cast<int64_t>(p_->options.scalars().size());
}
std::vector<DimBoundary> BenchmarkSet::boundary_conditions() const {
  if (p_->options.format() != BenchmarkFormat::kWell) return {};
  return bench::well_boundaries(p_->cat.files.front());
}
const std::string& BenchmarkSet::stats_file() const { return p_->cat.stats_file; }
int64_t BenchmarkSet::n_time_varying_inputs() const {
  int64_t c = 0;
  for (size_t i : p_->in_tv) c += static_cast<int64_t>(p_->cat.fields[i].channels.size());
  return c;
}

std::vector<std::string> BenchmarkSet::input_channels() const {
  std::vector<std::string> out;
  const int64_t tv = n_time_varying_inputs();
  for (int64_t t = 0; t < p_->options.history(); ++t) {
    for (int64_t c = 0; c < tv; ++c)
      out.push_back("t" + std::to_string(t) + ":" + p_->in_channels[static_cast<size_t>(c)]);
  }
  for (size_t c = static_cast<size_t>(tv); c < p_->in_channels.size(); ++c)
    out.push_back(p_->in_channels[c]);
  return out;
}

std::vector<std::string> BenchmarkSet::output_channels() const {
  std::vector<std::string> out;
  for (int64_t t = 0; t < p_->options.horizon(); ++t) {
    for (const auto& c : p_->out_channels) out.push_back("t" + std::to_string(t) + ":" + c);
  }
  return out;
}

torch::Tensor BenchmarkSet::read_steps(int64_t n, int64_t t0, int64_t t1, bool targets) const {
  TORCH_CHECK(n >= 0 && n < n_trajectories(), "read_steps: trajectory ", n, " of ",
              n_trajectories());
  const auto& unit = p_->cat.units[p_->cat.trajectories[static_cast<size_t>(n)].first];
  TORCH_CHECK(t0 >= 0 && t1 > t0 && t1 <= unit.n_steps, "read_steps: steps [", t0, ", ", t1,
              ") outside the trajectory's ", unit.n_steps);
  return p_->read(n, targets ? p_->out : p_->in_tv, t0, t1);
}

torch::Tensor BenchmarkSet::read_constant(int64_t n) const {
  TORCH_CHECK(n >= 0 && n < n_trajectories(), "read_constant: trajectory ", n, " of ",
              n_trajectories());
  return torch::cat({p_->read(n, p_->in_const, 0, 1)[0], p_->read_scalars(n)});
}

FieldPairs BenchmarkSet::windows(int64_t w0, int64_t w1) const {
  const auto& m = *p_;
  TORCH_CHECK(w0 >= 0 && w1 > w0 && w1 <= n_windows(), "windows: [", w0, ", ", w1, ") of ",
              n_windows());
  const int64_t h = m.options.history(), f = m.options.horizon();
  std::vector<torch::Tensor> xs, ys;
  const auto& off = m.window_offsets;
  // The trajectory of window w0, then each trajectory's windows in one read.
  auto n = static_cast<int64_t>(std::upper_bound(off.begin(), off.end(), w0) - off.begin()) - 1;
  for (int64_t w = w0; w < w1; ++n) {
    const int64_t s0 = w - off[static_cast<size_t>(n)];
    const int64_t s1 = std::min(w1, off[static_cast<size_t>(n) + 1]) - off[static_cast<size_t>(n)];
    const auto in = m.read(n, m.in_tv, s0, s1 - 1 + h);         // [s1 - s0 - 1 + h, F, *S]
    const auto out = m.read(n, m.out, s0 + h, s1 - 1 + h + f);  // [s1 - s0 - 1 + f, F_out, *S]
    const auto constant = read_constant(n);                     // [F_const + scalars, *S]
    for (int64_t s = 0; s < s1 - s0; ++s) {
      xs.push_back(torch::cat({in.narrow(0, s, h).flatten(0, 1), constant}, 0));
      ys.push_back(out.narrow(0, s, f).flatten(0, 1));
    }
    w += s1 - s0;
  }
  return {torch::stack(xs), torch::stack(ys)};
}

FieldPairs BenchmarkSet::all_windows() const { return windows(0, n_windows()); }

std::pair<int64_t, int64_t> BenchmarkSet::window_at(int64_t w) const {
  TORCH_CHECK(w >= 0 && w < n_windows(), "window_at: window ", w, " of ", n_windows());
  const auto& off = p_->window_offsets;
  const auto n = std::upper_bound(off.begin(), off.end(), w) - off.begin() - 1;
  return {static_cast<int64_t>(n), w - off[static_cast<size_t>(n)]};
}

std::pair<torch::Tensor, torch::Tensor> BenchmarkSet::input_field_stats() const {
  std::vector<size_t> fields = p_->in_tv;
  fields.insert(fields.end(), p_->in_const.begin(), p_->in_const.end());
  auto [mean, sd] = p_->stats(fields);
  if (n_scalar_inputs() == 0) return {mean, sd};
  const auto [sm, ss] = p_->scalar_stats();
  return {torch::cat({mean, sm}), torch::cat({sd, ss})};
}

std::pair<torch::Tensor, torch::Tensor> BenchmarkSet::target_field_stats() const {
  return p_->stats(p_->out);
}

std::pair<torch::Tensor, torch::Tensor> BenchmarkSet::shipped_input_stats() const {
  std::vector<size_t> fields = p_->in_tv;
  fields.insert(fields.end(), p_->in_const.begin(), p_->in_const.end());
  return p_->shipped(fields, true);
}

std::pair<torch::Tensor, torch::Tensor> BenchmarkSet::shipped_target_stats() const {
  return p_->shipped(p_->out, false);
}

std::vector<std::string> benchmark_files(const std::string& path, const BenchmarkOptions& options) {
  switch (options.format()) {
    case BenchmarkFormat::kWell:
      return bench::well_files(path, options.split());
    case BenchmarkFormat::kPdeArena:
      return bench::pdearena_files(path, options.split());
    case BenchmarkFormat::kPdeBench:
      break;
  }
  return {path};
}

torch::Tensor vrmse(const torch::Tensor& pred, const torch::Tensor& target, double eps) {
  TORCH_CHECK(pred.sizes() == target.sizes() && pred.dim() >= 3, "vrmse: pred ", pred.sizes(),
              " and target ", target.sizes(), " must be the same [B, C, *S]");
  // pred, target: [B, C, *S] -> [B, C]
  const auto p = pred.flatten(2).to(torch::kDouble), t = target.flatten(2).to(torch::kDouble);
  const auto mse = (p - t).pow(2).mean(2);
  const auto var = t.var(2, /*unbiased=*/true);
  return (mse / (var + eps)).sqrt().to(pred.scalar_type());
}

torch::Tensor nrmse(const torch::Tensor& pred, const torch::Tensor& target) {
  TORCH_CHECK(pred.sizes() == target.sizes() && pred.dim() >= 3, "nrmse: pred ", pred.sizes(),
              " and target ", target.sizes(), " must be the same [B, C, *S]");
  // pred, target: [B, C, *S] -> [B, C]
  const auto p = pred.flatten(2).to(torch::kDouble), t = target.flatten(2).to(torch::kDouble);
  return ((p - t).pow(2).mean(2).sqrt() / t.pow(2).mean(2).sqrt()).to(pred.scalar_type());
}

}  // namespace fno::data
