// GenOutput (gen_common.h): a run's output files, with the samples kept by
// resumable runs.
#include "gen_common.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <sstream>
#include <system_error>
#include <utility>

#include <unistd.h>

namespace fno::data::gen {

/// The HDF5 writer of one part: one chunk per sample (Hdf5SampleWriter) or
/// chunks of rows (Hdf5SampleWriter with bands of rows, not compressed).
class GenOutput::File {
 public:
  virtual ~File() = default;
  virtual void write(const std::string& name, int64_t first, const torch::Tensor& data) = 0;
  virtual void write_rows(const std::string& name, int64_t sample, int64_t row,
                          const torch::Tensor& data) = 0;
  virtual void commit(const std::vector<Attribute>& attributes) = 0;
};

namespace {

using Shapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

class SampleFile : public GenOutput::File {
 public:
  SampleFile(const std::string& path, const Shapes& shapes) : writer_(path, shapes) {}
  void write(const std::string& name, int64_t first, const torch::Tensor& data) override {
    writer_.write(name, first, data);
  }
  void write_rows(const std::string&, int64_t, int64_t, const torch::Tensor&) override {
    TORCH_CHECK(false, "GenOutput::write_rows: the output is not in the row layout");
  }
  void commit(const std::vector<Attribute>& attributes) override { writer_.commit(attributes); }

 private:
  Hdf5SampleWriter writer_;
};

/// Chunks of rows, (1, chunk_rows, R2), not compressed, written a band of
/// rows at a time: each band's write (on a thread of its own, one in flight)
/// overlaps the making of the next.
class RowFile : public GenOutput::File {
 public:
  RowFile(const std::string& path, const Shapes& shapes, int64_t chunk_rows)
      : writer_(path, shapes, SampleWriterOptions().compress(false).band_rows(chunk_rows)) {}
  ~RowFile() override {
    if (pending_.valid()) pending_.wait();  // (its error, if any, was or will be said)
  }
  void write(const std::string& name, int64_t first, const torch::Tensor& data) override {
    wait();
    writer_.write(name, first, data);
  }
  void write_rows(const std::string& name, int64_t sample, int64_t row,
                  const torch::Tensor& data) override {
    // Copied here, on the caller's device and stream, so that the band can be
    // reused; from CUDA into pinned memory (LibTorch's caching host allocator
    // keeps the blocks).
    torch::Tensor host;
    if (data.is_cuda()) {
      host = torch::empty(data.sizes(),
                          torch::TensorOptions().dtype(torch::kFloat).pinned_memory(true));
      host.copy_(data);
    } else {
      host = data.detach().to(torch::kFloat).contiguous();
      if (host.data_ptr() == data.data_ptr()) host = host.clone();  // the caller's, not ours
    }
    wait();
    pending_ = std::async(std::launch::async, [this, name, sample, row, host = std::move(host)] {
      writer_.write_rows(name, sample, /*dim=*/1, row, host.unsqueeze(0));
    });
  }
  void commit(const std::vector<Attribute>& attributes) override {
    wait();
    writer_.commit(attributes);
  }

 private:
  /// Waits for the write in flight; throws its error.
  void wait() {
    if (pending_.valid()) pending_.get();
  }

  Hdf5SampleWriter writer_;
  std::future<void> pending_;
};

}  // namespace

GenOutput::GenOutput(const std::vector<std::string>& paths, int64_t total, int64_t test_samples,
                     const std::vector<std::pair<std::string, std::vector<int64_t>>>& datasets,
                     Resume resume, int64_t chunk_rows)
    : datasets_(datasets), total_(total), resume_(std::move(resume)), chunk_rows_(chunk_rows) {
  TORCH_CHECK(chunk_rows_ == 0 || resume_.dir.empty(),
              "GenOutput: the row layout is not resumable");
  for (const auto& d : datasets) names_.push_back(d.first);
  const int64_t n_train = total - test_samples;
  parts_.push_back({paths.at(0), test_samples == 0 ? "all" : "train", 0, n_train});
  if (test_samples > 0) parts_.push_back({paths.at(1), "test", n_train, test_samples});
  max_.resize(parts_.size());
  if (resume_.dir.empty()) {
    open_writers();
  } else {
    find_kept();  // the files are made at commit, from the kept samples
  }
}

GenOutput::~GenOutput() {
  // A resumable run that made the directory of kept samples and ends (an
  // error, a stop) with none in it leaves nothing behind; rmdir keeps a
  // directory that holds anything.
  if (created_dir_ && resume_.workers == 1) ::rmdir(resume_.dir.c_str());
}

void GenOutput::open_writers() {
  for (const auto& part : parts_) {
    std::vector<std::pair<std::string, std::vector<int64_t>>> shaped;
    for (const auto& [name, sample_shape] : datasets_) {
      std::vector<int64_t> shape{part.count};
      shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
      shaped.emplace_back(name, shape);
    }
    if (chunk_rows_ > 0) {
      writers_.push_back(std::make_unique<RowFile>(part.path, shaped, chunk_rows_));
    } else {
      writers_.push_back(std::make_unique<SampleFile>(part.path, shaped));
    }
  }
}

void GenOutput::for_each_share(int64_t start, int64_t b,
                               const std::function<void(size_t, int64_t, int64_t)>& fn) const {
  for (size_t p = 0; p < parts_.size(); ++p) {
    const int64_t lo = std::max(start, parts_[p].first);
    const int64_t hi = std::min(start + b, parts_[p].first + parts_[p].count);
    if (lo < hi) fn(p, lo - start, hi - lo);
  }
}

void GenOutput::write_files(int64_t start, const std::vector<torch::Tensor>& data) {
  const int64_t b = data.at(0).size(0);
  for_each_share(start, b, [&](size_t p, int64_t offset, int64_t count) {
    // Sample by sample, so that the chunks lie in the file in the same order
    // whatever the batch size: equal data give equal bytes.
    for (int64_t i = offset; i < offset + count; ++i) {
      for (size_t d = 0; d < names_.size(); ++d) {
        writers_[p]->write(names_[d], start + i - parts_[p].first, data[d].narrow(0, i, 1));
      }
    }
  });
}

void GenOutput::add_stats(int64_t start, int64_t b,
                          const std::vector<std::pair<std::string, std::vector<double>>>& stats) {
  for (const auto& [name, values] : stats) {
    TORCH_CHECK(static_cast<int64_t>(values.size()) == b, "GenOutput: statistic '", name, "' has ",
                values.size(), " values for ", b, " samples");
    double& sum = sum_[name];
    for (double v : values) sum += v;
    for_each_share(start, b, [&](size_t p, int64_t offset, int64_t count) {
      auto it = max_[p].try_emplace(name, values[static_cast<size_t>(offset)]).first;
      for (int64_t i = offset; i < offset + count; ++i) {
        it->second = std::max(it->second, values[static_cast<size_t>(i)]);
      }
    });
  }
}

namespace {

constexpr const char* kShardMagic = "fno_datagen_partial";

std::string shard_name(int64_t first, int64_t end) {
  char name[64];
  std::snprintf(name, sizeof name, "samples_%010lld_%010lld.h5", static_cast<long long>(first),
                static_cast<long long>(end));
  return name;
}

std::string settings_text(const std::vector<std::pair<std::string, std::string>>& settings) {
  std::string text;
  for (const auto& [name, value] : settings) text += name + " " + value + "\n";
  return text;
}

std::vector<std::pair<std::string, std::string>> parse_settings(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    out.emplace_back(line.substr(0, space),
                     space == std::string::npos ? "" : line.substr(space + 1));
  }
  return out;
}

std::string values_text(const std::vector<double>& values) {
  std::string text;
  char buf[40];
  for (double v : values) {
    std::snprintf(buf, sizeof buf, "%.17g", v);
    if (!text.empty()) text += ' ';
    text += buf;
  }
  return text;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

/// The statistics' values, as doubles on the CPU.
std::vector<std::pair<std::string, std::vector<double>>> stat_values(const SampleStats& stats) {
  std::vector<std::pair<std::string, std::vector<double>>> values;
  for (const auto& [name, t] : stats) {
    const torch::Tensor v = t.detach().to(torch::kCPU, torch::kDouble).contiguous().view(-1);
    values.emplace_back(
        name, std::vector<double>(v.data_ptr<double>(), v.data_ptr<double>() + v.numel()));
  }
  return values;
}

}  // namespace

namespace {

using Settings = std::vector<std::pair<std::string, std::string>>;

/// The kept batches in `dir`, sorted by first sample; a batch file whose
/// writing was killed is removed (one worker), or left to the worker writing it.
template <class Shard>
std::vector<Shard> list_shards(const std::string& dir, int64_t workers) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<Shard> shards;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".samples_", 0) == 0 && name.find(".h5.tmp.") != std::string::npos) {
      if (workers == 1) fs::remove(entry.path(), ec);
      continue;
    }
    long long a = -1, b = -1;
    char tail = 0;
    if (std::sscanf(name.c_str(), "samples_%lld_%lld.h5%c", &a, &b, &tail) != 2 ||
        name != shard_name(a, b) || a < 0 || b <= a) {
      throw std::runtime_error(dir + ": holds " + quoted(name) +
                               ", which fno_datagen --resume did not write; move it away");
    }
    shards.push_back({a, b - a, dir + "/" + name});
  }
  if (ec) throw std::runtime_error(dir + ": cannot list the directory: " + ec.message());
  std::sort(shards.begin(), shards.end(), [](const Shard& x, const Shard& y) {
    return x.first != y.first ? x.first < y.first : x.count < y.count;
  });
  return shards;
}

/// Refuses a kept batch made with other settings than `mine` (one line naming
/// the first setting that differs).
void check_settings(const std::string& dir, const Settings& mine_all, const std::string& text) {
  const auto theirs = parse_settings(text);
  for (size_t i = 0; i < std::max(theirs.size(), mine_all.size()); ++i) {
    const auto& mine = i < mine_all.size() ? mine_all[i] : std::pair<std::string, std::string>{};
    const auto& old = i < theirs.size() ? theirs[i] : std::pair<std::string, std::string>{};
    if (mine == old) continue;
    const std::string key = mine.first.empty() ? old.first : mine.first;
    std::string was = old.second;
    for (const auto& t : theirs) {
      if (t.first == key) was = t.second;
    }
    // "X_contents": the contents of the file of option X (its path, the
    // setting X, is the same, or it would have differed first).
    const std::string suffix = "_contents";
    if (key.size() > suffix.size() &&
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::string option = key.substr(0, key.size() - suffix.size());
      // (const: a non-const std::string would pick std::quoted by ADL)
      const std::string file = [&] {
        for (const auto& m : mine_all) {
          if (m.first == option) return m.second;
        }
        return std::string();
      }();
      TORCH_CHECK_VALUE(false, "resume: --", option, " ", quoted(file), " changed since the ",
                        "samples kept in ", quoted(dir), " were made (then ", was, "; now ",
                        mine.second, "); restore it, or remove ", quoted(dir), " to start again");
    }
    TORCH_CHECK_VALUE(false, "resume: the samples kept in ", quoted(dir), " were made with ", key,
                      " ", was.empty() ? "(none)" : was, ", this run has ", key, " ",
                      mine.second.empty() ? "(none)" : mine.second,
                      "; go on with the same settings, or remove ", quoted(dir), " to start again");
  }
}

/// A kept batch's per-sample statistics (its "stat_*" attributes), checked
/// against its `count` samples.
std::vector<std::pair<std::string, std::vector<double>>> kept_stats(
    const std::string& path, int64_t count, const std::vector<Attribute>& attrs) {
  std::vector<std::pair<std::string, std::vector<double>>> stats;
  for (const auto& a : attrs) {
    if (a.name.rfind("stat_", 0) != 0 || a.is_number) continue;
    std::vector<double> values;
    std::istringstream in(a.text);
    for (std::string word; in >> word;) values.push_back(std::strtod(word.c_str(), nullptr));
    if (static_cast<int64_t>(values.size()) != count) {
      throw std::runtime_error(path + ": attribute " + quoted(a.name) + " holds " +
                               std::to_string(values.size()) + " values for " +
                               std::to_string(count) + " samples; the file is damaged");
    }
    stats.emplace_back(a.name.substr(5), std::move(values));
  }
  return stats;
}

}  // namespace

void GenOutput::find_kept() {
  namespace fs = std::filesystem;
  const std::string& dir = resume_.dir;
  std::error_code ec;
  const auto status = fs::status(dir, ec);
  if (!fs::exists(status)) {
    if (!fs::create_directory(dir, ec) && ec) {
      throw std::runtime_error(dir +
                               ": cannot create the directory of kept samples: " + ec.message());
    }
    created_dir_ = true;
    return;
  }
  if (!fs::is_directory(status)) {
    throw std::runtime_error(dir +
                             ": not a directory of samples kept by fno_datagen --resume; "
                             "move it away to start again");
  }
  auto shards = list_shards<Shard>(dir, resume_.workers);
  int64_t end = 0, kept = 0;
  for (const auto& shard : shards) {
    if (shard.first < end || shard.first + shard.count > total_) {
      throw std::runtime_error(
          shard.path + ": samples [" + std::to_string(shard.first) + ", " +
          std::to_string(shard.first + shard.count) +
          (shard.first < end
               ? ") overlap the kept ones before, up to " + std::to_string(end)
               : ") are not within the run's " + std::to_string(total_) + " samples") +
          "; the kept samples are damaged: remove " + quoted(dir) + " to start again");
    }
    const std::vector<Attribute> attrs = read_hdf5_attributes(shard.path);
    const auto find = [&](const char* key) -> const Attribute* {
      for (const auto& a : attrs) {
        if (a.name == key) return &a;
      }
      return nullptr;
    };
    const Attribute* magic = find(kShardMagic);
    const Attribute* settings = find("settings");
    if (magic == nullptr || settings == nullptr || settings->is_number) {
      throw std::runtime_error(shard.path + ": not a batch kept by fno_datagen --resume (no " +
                               kShardMagic + " attribute); move it away");
    }
    const Attribute* first = find("first_sample");
    const Attribute* count = find("samples");
    if (first == nullptr || count == nullptr || !first->is_number || !count->is_number ||
        first->number != static_cast<double>(shard.first) ||
        count->number != static_cast<double>(shard.count)) {
      throw std::runtime_error(
          shard.path + ": holds samples [" +
          (first && count
               ? format_number(first->number) + ", " + format_number(first->number + count->number)
               : std::string("?, ?")) +
          "), not [" + std::to_string(shard.first) + ", " +
          std::to_string(shard.first + shard.count) + "); the file is damaged");
    }
    check_settings(dir, resume_.settings, settings->text);
    add_stats(shard.first, shard.count, kept_stats(shard.path, shard.count, attrs));
    end = shard.first + shard.count;
    kept += shard.count;
  }
  shards_ = std::move(shards);
  kept_ = kept;
}

int64_t GenOutput::next_batch(int64_t from, int64_t batch) const {
  int64_t start = from;
  while (start < total_) {
    // Past the kept shard that holds `start`, if any (shards_ is sorted).
    bool moved = false;
    for (const auto& shard : shards_) {
      if (shard.first <= start && start < shard.first + shard.count) {
        start = shard.first + shard.count;
        moved = true;
      }
    }
    if (moved) continue;
    if (resume_.workers <= 1 || (start / batch) % resume_.workers == resume_.worker) return start;
    start = (start / batch + 1) * batch;  // another worker's batch
  }
  return total_;
}

int64_t GenOutput::batch_end(int64_t start, int64_t batch) const {
  int64_t end = std::min(start + batch, total_);
  for (const auto& shard : shards_) {
    if (shard.first > start) end = std::min(end, shard.first);
  }
  return end;
}

void GenOutput::write(int64_t start, const std::vector<torch::Tensor>& data,
                      const SampleStats& stats) {
  TORCH_CHECK(data.size() == names_.size(), "GenOutput::write: ", data.size(), " tensors for ",
              names_.size(), " datasets");
  const int64_t b = data.at(0).size(0);
  const auto values = stat_values(stats);
  if (resume_.dir.empty()) {
    write_files(start, data);
    add_stats(start, b, values);
    kept_ += b;
    return;
  }
  for (const auto& shard : shards_) {
    TORCH_CHECK(start + b <= shard.first || shard.first + shard.count <= start,
                "GenOutput::write: samples [", start, ", ", start + b, ") overlap the kept [",
                shard.first, ", ", shard.first + shard.count, ")");
  }
  const std::string path = resume_.dir + "/" + shard_name(start, start + b);
  std::vector<std::pair<std::string, std::vector<int64_t>>> shaped;
  for (const auto& [name, sample_shape] : datasets_) {
    std::vector<int64_t> shape{b};
    shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
    shaped.emplace_back(name, shape);
  }
  Hdf5SampleWriter shard(path, shaped);
  for (size_t d = 0; d < names_.size(); ++d) shard.write(names_[d], 0, data[d]);
  std::vector<Attribute> attrs{
      text_attr(kShardMagic, "samples [" + std::to_string(start) + ", " +
                                 std::to_string(start + b) +
                                 ") of a resumable fno_datagen run; fno_datagen --resume makes "
                                 "the output files from these files"),
      text_attr("settings", settings_text(resume_.settings)),
      number_attr("first_sample", static_cast<double>(start)),
      number_attr("samples", static_cast<double>(b)),
  };
  for (const auto& [name, v] : values) attrs.push_back(text_attr("stat_" + name, values_text(v)));
  shard.commit(attrs);  // fsync, rename: kept from here on
  shards_.insert(std::upper_bound(shards_.begin(), shards_.end(), start,
                                  [](int64_t s, const Shard& x) { return s < x.first; }),
                 {start, b, path});
  kept_ += b;
  add_stats(start, b, values);
}

void GenOutput::write_rows(size_t dataset, int64_t sample, int64_t row, const torch::Tensor& data) {
  TORCH_CHECK(chunk_rows_ > 0, "GenOutput::write_rows: the output is not in the row layout");
  TORCH_CHECK(dataset < names_.size(), "GenOutput::write_rows: no dataset ", dataset);
  for_each_share(sample, 1, [&](size_t p, int64_t, int64_t) {
    writers_[p]->write_rows(names_[dataset], sample - parts_[p].first, row, data);
  });
}

void GenOutput::mark_written(int64_t start, int64_t b, const SampleStats& stats) {
  TORCH_CHECK(chunk_rows_ > 0, "GenOutput::mark_written: the output is not in the row layout");
  add_stats(start, b, stat_values(stats));
  kept_ += b;
}

void GenOutput::check_stop(const GenHooks& hooks, int64_t done) const {
  if (resume_.dir.empty()) {
    ::fno::data::gen::check_stop(hooks, done, total_);
    return;
  }
  const int sig = hooks.stop_requested ? hooks.stop_requested() : 0;
  const bool at_count = resume_.stop_after > 0 && kept_ >= resume_.stop_after && kept_ < total_;
  if (sig == 0 && !at_count) return;
  const std::string how = sig != 0 ? std::string("stopped by ") + signal_name(sig)
                                   : std::string("stopped at --stop-after-samples");
  throw DatagenInterrupted(sig, how + ": " + std::to_string(kept_) + " of " +
                                    std::to_string(total_) + " samples done, kept in " +
                                    quoted(resume_.dir) +
                                    "; run the same command with --resume to go on");
}

double GenOutput::stat_max(size_t p, const std::string& name) const {
  const auto it = max_.at(p).find(name);
  return it == max_.at(p).end() ? 0.0 : it->second;
}

double GenOutput::stat_max(const std::string& name) const {
  double m = 0;
  bool any = false;
  for (const auto& part : max_) {
    const auto it = part.find(name);
    if (it == part.end()) continue;
    m = any ? std::max(m, it->second) : it->second;
    any = true;
  }
  return m;
}

double GenOutput::stat_sum(const std::string& name) const {
  const auto it = sum_.find(name);
  return it == sum_.end() ? 0.0 : it->second;
}

void GenOutput::commit(const std::function<std::vector<Attribute>(size_t)>& attributes) {
  if (!resume_.dir.empty()) {
    TORCH_CHECK(kept_ == total_, "GenOutput::commit: ", kept_, " of ", total_, " samples kept");
    open_writers();
    for (const auto& shard : shards_) {
      std::vector<torch::Tensor> data;
      for (const auto& [name, sample_shape] : datasets_) {
        torch::Tensor t = load_hdf5(shard.path, LoadOptions().x_key(name).y_key(name)).x.squeeze(1);
        std::vector<int64_t> want{shard.count};
        want.insert(want.end(), sample_shape.begin(), sample_shape.end());
        if (t.sizes().vec() != want) {
          throw std::runtime_error(shard.path + ": dataset " + quoted(name) + " has shape " +
                                   c10::str(t.sizes()) + ", expected " +
                                   c10::str(c10::IntArrayRef(want)) + "; the file is damaged");
        }
        data.push_back(std::move(t));
      }
      write_files(shard.first, data);
    }
  }
  std::vector<std::string> committed;
  try {
    for (size_t p = 0; p < parts_.size(); ++p) {
      writers_[p]->commit(attributes(p));
      committed.push_back(parts_[p].path);
    }
  } catch (...) {
    for (const auto& path : committed) std::remove(path.c_str());  // all files or none
    throw;
  }
  if (!resume_.dir.empty()) {
    std::error_code ec;
    for (const auto& shard : shards_) std::filesystem::remove(shard.path, ec);
    std::filesystem::remove(resume_.dir, ec);
  }
}

}  // namespace fno::data::gen
