// GPU tests of the Navier-Stokes solve (fno_data/navier_stokes_gen.h): the
// steps replayed from CUDA graphs give the numbers of the steps launched one by
// one, bit for bit (the exact blow-up step relies on it); CUDA follows the CPU
// to round-off; the fused step (cuda/ns_step.cu) follows the LibTorch step to
// round-off, and its graphs give its eager numbers bit for bit; a sample's
// numbers against the batch it is solved in; the exact blow-up step under
// graphs; the generator's automatic batch and its files with graphs on and off.
#include <fno_data/darcy.h>
#include <fno_data/navier_stokes_gen.h>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "golden.h"

using fno::data::NsSolveOptions;

namespace {

double ns_rel(const torch::Tensor& a, const torch::Tensor& b) {
  const auto a64 = a.to(torch::kCPU, torch::kDouble), b64 = b.to(torch::kCPU, torch::kDouble);
  return ((a64 - b64).norm() / b64.norm()).item<double>();
}

torch::Tensor grf_batch(int64_t first, int64_t count, int64_t r) {
  std::vector<torch::Tensor> fields;
  for (int64_t i = first; i < first + count; ++i) {
    fields.push_back(fno::data::ns_initial_vorticity(7, i, r));
  }
  return torch::stack(fields);
}

int64_t cuda_blow_up_step(const torch::Tensor& w0, int64_t steps_per_record, int64_t records,
                          const NsSolveOptions& options) {
  try {
    fno::data::ns_solve(w0, torch::Tensor(), 1e-5, 0.5, steps_per_record, records, options);
  } catch (const fno::data::NsBlowUp& e) {
    return e.step();
  }
  return 0;
}

}  // namespace

TEST_CASE(
    "GPU Navier-Stokes: CUDA graphs give the steps' numbers bit for bit; CUDA follows the CPU") {
  const int64_t r = 64;
  const auto w0 = grf_batch(0, 3, r);
  const auto f = fno::data::ns_paper_forcing(r, torch::TensorOptions());
  const auto wc = w0.to(torch::kCUDA), fc = f.to(torch::kCUDA);
  for (const auto precision : {torch::kDouble, torch::kFloat}) {
    INFO("precision " << precision);
    const auto o = NsSolveOptions().precision(precision);
    // 250 steps a record: two replays of 100-step graphs and 50 steps launched alone.
    const auto eager =
        fno::data::ns_solve(wc, fc, 1e-3, 1e-3, 250, 2, NsSolveOptions(o).cuda_graph(false));
    const auto graph = fno::data::ns_solve(wc, fc, 1e-3, 1e-3, 250, 2, o);
    const auto graph7 =
        fno::data::ns_solve(wc, fc, 1e-3, 1e-3, 250, 2, NsSolveOptions(o).graph_steps(7));
    CHECK(graph.is_cuda());
    CHECK((graph.scalar_type() == precision));
    MESSAGE(precision << ": graph against eager, max |difference| "
                      << (graph - eager).abs().max().item<double>());
    CHECK(torch::equal(graph, eager));
    CHECK(torch::equal(graph7, eager));
    // CUDA against the CPU (cuFFT against pocketfft/MKL): round-off, grown over 500 steps.
    const auto cpu = fno::data::ns_solve(w0, f, 1e-3, 1e-3, 250, 2, o);
    const double e = ns_rel(graph, cpu);
    MESSAGE(precision << ": CUDA against CPU " << e);
    CHECK(e < (precision == torch::kDouble ? 1e-11 : 1e-4));
  }
}

TEST_CASE(
    "GPU Navier-Stokes: the fused step follows the LibTorch step; its graphs give its numbers") {
  REQUIRE_MESSAGE(fno::data::ns_fused_step_available(),
                  "the fused step is not compiled in (no nvcc) or FNO_NS_FUSED=0");
  for (const int64_t r : {64, 256}) {
    const auto w0 = grf_batch(0, 3, r).to(torch::kCUDA);
    const auto paper = fno::data::ns_paper_forcing(r, torch::TensorOptions(torch::kCUDA));
    for (const bool forcing : {true, false}) {
      const auto f = forcing ? paper : torch::Tensor();
      for (const auto precision : {torch::kFloat, torch::kDouble}) {
        INFO("R " << r << ", forcing " << forcing << ", precision " << precision);
        const auto o = NsSolveOptions().precision(precision);
        // 200 steps of the paper's dt, recorded after 100 and 200.
        const auto aten = fno::data::ns_solve(w0, f, 1e-3, 1e-4, 100, 2,
                                              NsSolveOptions(o).fused(false).cuda_graph(false));
        const auto fused =
            fno::data::ns_solve(w0, f, 1e-3, 1e-4, 100, 2, NsSolveOptions(o).cuda_graph(false));
        REQUIRE((fused.scalar_type() == precision));
        const double w_max = aten.abs().max().item<double>();
        const double e = (fused - aten).abs().max().item<double>() / w_max;
        MESSAGE(r << "^2, forcing " << forcing << ", " << precision
                  << ": fused against LibTorch, max |difference| / max |w| " << e
                  << (torch::equal(fused, aten) ? " (bitwise equal)" : ""));
        CHECK(w_max > 0);
        CHECK(e < (precision == torch::kDouble ? 1e-12 : 1e-5));
        // Graphs of 30 steps: three replays and 10 steps launched alone a record.
        const auto graph =
            fno::data::ns_solve(w0, f, 1e-3, 1e-4, 100, 2, NsSolveOptions(o).graph_steps(30));
        CHECK(torch::equal(graph, fused));
      }
    }
  }
}

TEST_CASE("GPU Navier-Stokes: a sample's numbers against the batch it is solved in") {
  // cuFFT's plans for another batch count may round differently: say how much.
  const int64_t r = 256;
  const auto w0 = grf_batch(0, 4, r).to(torch::kCUDA);
  const auto f = fno::data::ns_paper_forcing(r, torch::TensorOptions(torch::kCUDA));
  for (const auto precision : {torch::kDouble, torch::kFloat}) {
    const auto o = NsSolveOptions().precision(precision);
    const auto together = fno::data::ns_solve(w0, f, 1e-3, 1e-4, 200, 1, o);
    const auto alone = fno::data::ns_solve(w0.narrow(0, 2, 1), f, 1e-3, 1e-4, 200, 1, o);
    const auto two = fno::data::ns_solve(w0.narrow(0, 2, 2), f, 1e-3, 1e-4, 200, 1, o);
    const bool same1 = torch::equal(together.narrow(0, 2, 1), alone);
    const bool same2 = torch::equal(together.narrow(0, 2, 2), two);
    MESSAGE(precision << " at 256^2, 200 steps: sample 2 in a batch of 4 against alone: "
                      << (same1 ? "bitwise equal" : "differs") << " (relative "
                      << ns_rel(together.narrow(0, 2, 1), alone)
                      << "); against a batch of 2: " << (same2 ? "bitwise equal" : "differs"));
    CHECK(ns_rel(together.narrow(0, 2, 1), alone) < (precision == torch::kDouble ? 1e-12 : 1e-5));
  }
}

TEST_CASE("GPU Navier-Stokes: the exact blow-up step under CUDA graphs, both precisions") {
  const int64_t r = 16;
  const auto t = torch::arange(r, torch::kDouble) / static_cast<double>(r);
  const auto x = t.view({-1, 1}), y = t.view({1, -1});
  const double pi = 3.14159265358979323846;
  const auto w0 = (1e3 * (torch::cos(2 * pi * x) * torch::cos(2 * pi * y) +
                          0.5 * torch::sin(4 * pi * x) + 0.3 * torch::cos(2 * pi * (x + 2 * y))))
                      .unsqueeze(0)
                      .to(torch::kCUDA);
  for (const auto precision : {torch::kDouble, torch::kFloat}) {
    INFO("precision " << precision);
    const auto o = NsSolveOptions().precision(precision);
    const int64_t exact = cuda_blow_up_step(w0, 1, 200, NsSolveOptions(o).cuda_graph(false));
    MESSAGE("blow-up at step " << exact << " (" << precision << ", CUDA)");
    REQUIRE(exact > 0);
    CHECK(cuda_blow_up_step(w0, 200, 1, o) == exact);
    CHECK(cuda_blow_up_step(w0, 200, 1, NsSolveOptions(o).graph_steps(3)) == exact);
    CHECK(cuda_blow_up_step(w0, 7, 30, o) == exact);
  }
}

TEST_CASE("GPU Navier-Stokes files: the automatic batch; the same bytes with graphs on and off") {
  const auto base = fno::data::NavierStokesGenOptions()
                        .resolution(64)
                        .samples(5)
                        .seed(3)
                        .viscosity(1e-3)
                        .dt(1e-3)
                        .t_final(0.2)
                        .record_every(0.1)
                        .subsample(2)
                        .device("cuda");
  for (const std::string precision : {"float64", "float32"}) {
    INFO("precision " << precision);
    const auto on = fno::test::out_path("gpu_ns_graph_" + precision + ".h5");
    const auto off = fno::test::out_path("gpu_ns_nograph_" + precision + ".h5");
    std::filesystem::remove(on);  // the generators write over no file
    std::filesystem::remove(off);
    const auto s_on = fno::data::generate_navier_stokes(
        fno::data::NavierStokesGenOptions(base).precision(precision).out(on));
    const auto s_off = fno::data::generate_navier_stokes(
        fno::data::NavierStokesGenOptions(base).precision(precision).cuda_graph(false).out(off));
    CHECK(s_on.batch == 5);  // all the samples fit
    CHECK(s_on.solve_seconds > 0);
    CHECK(fno::test::read_bytes(on) == fno::test::read_bytes(off));
  }
}
