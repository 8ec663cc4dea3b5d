#include <fno_engine/tiled_plan.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace fno {

std::string TiledChoice::to_string() const {
  return "tiled micro_batches=" + std::to_string(micro_batches) + "; " + plan.to_string();
}

bool is_tiled_plan_text(const std::string& text) { return text.rfind("tiled ", 0) == 0; }

std::vector<double> encode_tiled_choice(const TiledChoice& c, int64_t layers) {
  std::vector<double> v{static_cast<double>(c.plan.tile_rows), static_cast<double>(c.micro_batches),
                        static_cast<double>(c.plan.gradient), c.plan.keep_latest ? 1.0 : 0.0};
  for (int64_t j = 0; j < layers; ++j) {
    v.push_back(c.plan.inputs.empty() ? -1.0
                                      : static_cast<double>(c.plan.inputs[static_cast<size_t>(j)]));
  }
  return v;
}

TiledChoice decode_tiled_choice(const std::vector<double>& v) {
  TiledChoice c;
  c.plan.tile_rows = static_cast<int64_t>(v.at(0));
  c.micro_batches = static_cast<int64_t>(v.at(1));
  c.plan.gradient = static_cast<TilePlace>(static_cast<int>(v.at(2)));
  c.plan.keep_latest = v.at(3) > 0.5;
  for (size_t j = 4; j < v.size() && v[j] >= 0; ++j) {
    c.plan.inputs.push_back(static_cast<TilePlace>(static_cast<int>(v[j])));
  }
  return c;
}

TiledChoice tiled_choice_for_policy(const offload::Policy& policy, int64_t layers, int64_t rows,
                                    int64_t chunks, int64_t micro_batches, int64_t batch,
                                    bool host) {
  using K = offload::Policy::Kind;
  if (policy.kind == K::kAuto) {
    throw std::invalid_argument("tiled_choice_for_policy: offload policy auto has no fixed plan");
  }
  TORCH_CHECK(layers >= 1 && rows >= 1 && chunks >= 1 && micro_batches >= 1 && batch >= 1,
              "tiled_choice_for_policy: layers ", layers, ", rows ", rows, ", chunks ", chunks,
              ", micro_batches ", micro_batches, " and batch ", batch, " must all be >= 1");
  TiledChoice c;
  c.micro_batches = std::min(micro_batches, batch);
  const int64_t pieces = policy.kind == K::kNone ? 1 : std::min(chunks, rows);
  c.plan.tile_rows = (rows + pieces - 1) / pieces;
  const auto moved = host ? TilePlace::kHost : TilePlace::kDevice;
  const auto n = static_cast<size_t>(layers);
  switch (policy.kind) {
    case K::kNone:
    case K::kSlim:
      break;  // TiledPlan's default: block 0's input remade, the others on the device
    case K::kAll:
    case K::kRecomputeOffload:
      c.plan.inputs.assign(n, moved);
      break;
    case K::kBlocks:
      // Stage s < K is offloaded; block j is stage j + 1.
      for (int64_t j = 0; j < layers; ++j) {
        c.plan.inputs.push_back(j + 1 < policy.blocks ? moved : TilePlace::kDevice);
      }
      break;
    case K::kRecompute:
      c.plan.inputs.assign(n, TilePlace::kRecompute);
      break;
    case K::kAuto:
      break;
  }
  return c;
}

TiledChoice parse_tiled_choice(const std::string& text) {
  const std::string head = "tiled micro_batches=";
  const auto semi = text.find("; ");
  if (text.rfind(head, 0) != 0 || semi == std::string::npos) {
    throw std::invalid_argument("tiled plan '" + text +
                                "': expected 'tiled micro_batches=K; tile_rows=R, ...'");
  }
  TiledChoice c;
  try {
    size_t used = 0;
    const auto k = text.substr(head.size(), semi - head.size());
    c.micro_batches = std::stoll(k, &used);
    if (used != k.size() || c.micro_batches < 1) throw std::invalid_argument(k);
  } catch (const std::exception&) {
    throw std::invalid_argument("tiled plan '" + text + "': bad micro_batches");
  }
  c.plan = parse_tiled_plan(text.substr(semi + 2));
  return c;
}

namespace {

// What one micro-batch of a plan does, counted by walking the executor's
// sweeps (libfno/src/tiled.cpp): tails and liftings computed, and full-size
// tensors over the link each way, in units of one block input.
struct Walk {
  double tails_forward = 0, tails_backward = 0, lifts = 0;
  double d2h_forward = 0, h2d_forward = 0, d2h_backward = 0, h2d_backward = 0;
};

Walk walk(const std::vector<TilePlace>& places, const TiledPlan& plan) {
  const int64_t layers = static_cast<int64_t>(places.size());
  Walk w;
  const auto source = [&](int64_t j) {
    for (int64_t k = j; k >= 0; --k) {
      if (places[static_cast<size_t>(k)] != TilePlace::kRecompute) return k;
    }
    return int64_t{-1};
  };
  // Block j's input read once (not from `latest`): from its place, or remade.
  const auto read = [&](int64_t j, double& h2d, double& tails) {
    const auto p = places[static_cast<size_t>(j)];
    if (p == TilePlace::kHost) h2d += 1;
    if (p != TilePlace::kRecompute) return;
    const int64_t k = source(j);
    if (k < 0) w.lifts += 1;
    if (k >= 0 && places[static_cast<size_t>(k)] == TilePlace::kHost) h2d += 1;
    tails += static_cast<double>(j - std::max<int64_t>(k, 0));
  };
  const bool host_gradient = plan.gradient == TilePlace::kHost;
  w.lifts += 1;  // the lifting's sweep
  // (with keep_latest the last block's input is never stored)
  const auto stored = [&](int64_t j) {
    return places[static_cast<size_t>(j)] == TilePlace::kHost &&
           !(plan.keep_latest && j == layers - 1);
  };
  if (stored(0)) w.d2h_forward += 1;
  for (int64_t j = 0; j < layers; ++j) {
    if (!plan.keep_latest) read(j, w.h2d_forward, w.tails_forward);
    w.tails_forward += 1;
    if (j + 1 < layers && stored(j + 1)) w.d2h_forward += 1;
  }
  for (int64_t j = layers - 1; j >= 0; --j) {
    // With keep_latest, the last block's input is held from forward.
    if (!(plan.keep_latest && j == layers - 1)) read(j, w.h2d_backward, w.tails_backward);
    if (j == layers - 1) w.tails_backward += 1;  // z again, for the projection
    if (host_gradient) {
      w.d2h_backward += 1;
      if (j < layers - 1) w.h2d_backward += 1;
    }
  }
  w.lifts += 1;  // the lifting's backward
  if (host_gradient) w.h2d_backward += 1;
  return w;
}

// The step's compute per grid point and entry, in ms, per unit of work: one
// block tail's forward with its spectral transforms. From the whole-grid fp32
// step of the seed FNO on an H100 (85 ms for 8 x 1024^2: docs/performance.md)
// over its ~27 units; it only ranks plans, which auto then measures.
constexpr double kMsPerPointUnit = 3.7e-7;
// The fixed cost of one tile in one sweep (its launches and cuFFT calls):
// what makes many small tiles slower than a few large ones.
constexpr double kMsPerTileSweep = 0.12;
// Tiles per sweep at most (the least-memory plan uses this many).
constexpr int64_t kMaxTiles = 256;

}  // namespace

TiledChoice estimate_tiled(FNO model, at::IntArrayRef x_shape, TiledPlan plan,
                           int64_t micro_batches, const TiledContext& c) {
  TiledChoice out;
  out.plan = plan;
  out.micro_batches = micro_batches;
  const int64_t layers = model->options.n_layers();
  auto places = plan.inputs;
  if (places.empty()) {
    places.assign(static_cast<size_t>(layers), TilePlace::kDevice);
    places[0] = TilePlace::kRecompute;
  }
  auto shape = x_shape.vec();
  const int64_t batch = shape[0];
  shape[0] = (batch + micro_batches - 1) / micro_batches;  // the largest micro-batch
  const auto sz = tiled_sizes(model, shape);
  const double hidden = static_cast<double>(sz.hidden);
  const double tile = static_cast<double>(sz.tile_hidden(plan.tile_rows));
  const double output = static_cast<double>(sz.output);
  const auto count = [&](TilePlace p) {
    return static_cast<double>(std::count(places.begin(), places.end(), p));
  };
  const double on_device = count(TilePlace::kDevice), on_host = count(TilePlace::kHost);
  const bool host_gradient = plan.gradient == TilePlace::kHost;
  const double window = std::min(static_cast<double>(c.window), 2 * tile);
  // GPU memory: what lives outside the step, the output and the loss's
  // temporaries (Cout channels), the block inputs kept on the device, and the
  // tiles being worked on, fetched ahead and copied out.
  const double forward = on_device * hidden + (plan.keep_latest ? hidden : 0) + 5 * tile +
                         (on_host > 0 ? window + 2 * tile : 0);
  // (the gradient between blocks, or with keep_latest the last block's input
  // held from forward, which the gradient store replaces tile by tile)
  const bool held = !host_gradient || plan.keep_latest;
  // (a host input: two tiles fetched ahead, and the next sweep's first while
  // the sweep before it ends)
  const double backward = on_device * hidden + (held ? hidden : 0) + 8 * tile +
                          (on_host > 0 ? 3 * tile : 0) + (host_gradient ? window + 2 * tile : 0);
  out.peak_bytes = c.base_bytes + c.grad_bytes + static_cast<int64_t>(12 * output) +
                   static_cast<int64_t>(std::max(forward, backward));
  const double f = c.compress ? 0.5 : 1.0;  // host bytes per device byte
  out.host_bytes = static_cast<int64_t>((on_host + (host_gradient ? 2 : 0)) * hidden * f);
  // Time: the link's two directions run at once, each beside the compute.
  const auto w = walk(places, plan);
  double points = static_cast<double>(shape[0]);
  for (size_t i = 2; i < shape.size(); ++i) points *= static_cast<double>(shape[i]);
  // 16-bit activations move half the bytes: about half the time.
  const double elem = hidden / points / static_cast<double>(model->options.hidden_channels());
  const double unit = points * kMsPerPointUnit * (elem < 4 ? 0.5 : 1.0);
  const double forward_ms = unit * (2 * w.tails_forward + 0.6);
  const double backward_ms = unit * (4 * (layers) + 2 * w.tails_backward + 0.6 * w.lifts);
  const double link_ms = hidden * f / (c.link_gbps * 1e6);
  const double fwd = std::max(forward_ms, std::max(w.d2h_forward, w.h2d_forward) * link_ms);
  const double bwd = std::max(backward_ms, std::max(w.d2h_backward, w.h2d_backward) * link_ms);
  const double tiles = std::ceil(static_cast<double>(sz.rows) /
                                 static_cast<double>(std::max<int64_t>(plan.tile_rows, 1)));
  const double sweeps = static_cast<double>(2 * layers + 2);
  out.step_ms = static_cast<double>(micro_batches) * (fwd + bwd + tiles * sweeps * kMsPerTileSweep);
  return out;
}

namespace {

// The placements worth trying for `layers` blocks (a_0, the lifting's output,
// is remade from the input, or kept on the device with the rest).
std::vector<std::vector<TilePlace>> placements(int64_t layers) {
  using P = TilePlace;
  std::vector<std::vector<P>> out;
  const auto all = [&](P p) {
    std::vector<P> v(static_cast<size_t>(layers), p);
    v[0] = P::kRecompute;
    return v;
  };
  out.push_back(std::vector<P>(static_cast<size_t>(layers), P::kDevice));
  out.push_back(all(P::kDevice));
  // The last m inputs on the device (read first in backward), the rest on the host.
  for (int64_t m = layers - 1; m >= 0; --m) {
    auto v = all(P::kHost);
    for (int64_t j = layers - m; j < layers; ++j) v[static_cast<size_t>(j)] = P::kDevice;
    out.push_back(v);
  }
  // Every other input on the host, the ones between remade from it.
  for (const P kept : {P::kHost, P::kDevice}) {
    auto v = all(P::kRecompute);
    for (int64_t j = 2; j < layers; j += 2) v[static_cast<size_t>(j)] = kept;
    out.push_back(v);
  }
  out.push_back(all(P::kRecompute));
  return out;
}

}  // namespace

std::vector<TiledChoice> tiled_candidates(FNO model, at::IntArrayRef x_shape, int64_t budget,
                                          int64_t host_limit, const TiledContext& c, size_t count) {
  std::vector<TiledChoice> all;
  if (!tiled_unsupported(model).empty() || x_shape.size() < 4) return all;
  const int64_t batch = x_shape[0], rows = x_shape[2];
  const int64_t layers = model->options.n_layers();
  for (int64_t k = 1; k <= batch; k *= 2) {
    if (k > 1 && !c.can_split) break;
    // Halving the tiles down to one row (or kMaxTiles of them): the estimate's
    // per-tile cost weighs small tiles' launches against their memory.
    int64_t last_rows = -1;
    for (int64_t parts = 2; parts <= kMaxTiles; parts *= 2) {
      const int64_t tile_rows = (rows + parts - 1) / parts;
      if (tile_rows == last_rows) break;
      last_rows = tile_rows;
      for (const auto& places : placements(layers)) {
        for (const auto gradient : {TilePlace::kDevice, TilePlace::kHost}) {
          for (const bool latest : {true, false}) {
            TiledPlan plan;
            plan.tile_rows = tile_rows;
            plan.inputs = places;
            // keep_latest reads the last block's input from `latest` only.
            if (latest) plan.inputs.back() = TilePlace::kRecompute;
            plan.gradient = gradient;
            plan.keep_latest = latest;
            auto e = estimate_tiled(model, x_shape, plan, k, c);
            if (e.peak_bytes > budget || (host_limit > 0 && e.host_bytes > host_limit)) continue;
            all.push_back(std::move(e));
          }
        }
      }
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const TiledChoice& a, const TiledChoice& b) {
    return a.step_ms < b.step_ms;
  });
  // Distinct placements (the best tile size and micro-batches of each).
  std::vector<TiledChoice> out;
  std::set<std::string> seen;
  for (auto& e : all) {
    std::ostringstream key;
    for (const auto p : e.plan.inputs) key << to_string(p) << '/';
    key << to_string(e.plan.gradient) << e.plan.keep_latest;
    if (!seen.insert(key.str()).second) continue;
    out.push_back(std::move(e));
    if (out.size() >= count) break;
  }
  return out;
}

int64_t pinnable_host_bytes(int64_t limit) {
  if (limit > 0) return limit;
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (f >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024 / 4 * 3;
  }
  return 0;
}

TiledChoice least_memory_tiled(FNO model, at::IntArrayRef x_shape, const TiledContext& c) {
  const int64_t layers = model->options.n_layers();
  TiledPlan plan;
  plan.inputs.assign(static_cast<size_t>(layers), TilePlace::kRecompute);
  plan.gradient = TilePlace::kHost;
  plan.keep_latest = false;
  const int64_t rows = x_shape.size() > 2 ? x_shape[2] : 1;
  plan.tile_rows = (rows + kMaxTiles - 1) / kMaxTiles;
  return estimate_tiled(model, x_shape, plan, c.can_split ? x_shape[0] : 1, c);
}

}  // namespace fno
