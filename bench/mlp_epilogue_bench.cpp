// Whether cuBLASLt's epilogues fit the lifting and projection MLPs (issue 14,
// item 2), and what they would save: each MLP layer on the model's
// channel-first layout ([B, C, N]: per batch entry a row-major [C, N] matrix,
// so a per-channel bias runs along the rows of a row-major D, cuBLASLt's
// CUBLASLT_ORDER_ROW), timed against the LibTorch ops libfno runs today.
//
//   mlp_epilogue_bench --batch 8 --grid 1024 --dtypes float,bf16
//
// Per layer [Cin -> Cout] and dtype, rows of:
//   torch   baddbmm(b, W, x)                      (libfno's lin())
//   lt      cuBLASLt, CUBLASLT_EPILOGUE_BIAS       (same maths: rel. error shown)
//   torch   baddbmm + gelu (erf)                   (the MLPs' first layer)
//   lt      CUBLASLT_EPILOGUE_GELU_BIAS / GELU_AUX_BIAS (cuBLASLt's GELU: error vs erf shown)
//   torch   bmm(W^T, dy) + gelu_backward + channel sum (the MLP backward's dh and db)
//   lt      CUBLASLT_EPILOGUE_DGELU_BGRAD
// "no algorithm" where cuBLASLt's heuristic returns none for the layout.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>
#include "cuda_timing.h"

namespace {

void ck(cudaError_t e, const char* what) { fno::bench::check("mlp_epilogue_bench", e, what); }

double median_ms(int reps, const std::function<void()>& f) {
  return fno::bench::median_ms("mlp_epilogue_bench", reps, f);
}

double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  const auto d = (a.to(torch::kDouble) - b.to(torch::kDouble)).norm().item<double>();
  return d / std::max(b.to(torch::kDouble).norm().item<double>(), 1e-300);
}

cudaDataType lt_type(torch::ScalarType t) {
  return t == torch::kBFloat16 ? CUDA_R_16BF : t == torch::kHalf ? CUDA_R_16F : CUDA_R_32F;
}

// A matrix operand as cuBLASLt sees it: `rows` x `cols` in `order`, leading
// dimension ld, `batch` of them `stride` elements apart.
struct Mat {
  const void* p;
  int64_t rows, cols, ld, stride;
};

// One cuBLASLt matmul D = op(A) op(B) with an epilogue; `why` says why not
// where it cannot run.
struct LtGemm {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t heur{};
  bool ok = false;
  std::string why;
  const void *a = nullptr, *b = nullptr;
  void* d = nullptr;
  ~LtGemm() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
  }
  static bool layout(cublasLtMatrixLayout_t* l, cudaDataType t, const Mat& m, cublasLtOrder_t order,
                     int batch) {
    if (cublasLtMatrixLayoutCreate(l, t, m.rows, m.cols, m.ld) != CUBLAS_STATUS_SUCCESS)
      return false;
    const int32_t count = batch;
    const int64_t stride = m.stride;
    return cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order,
                                            sizeof(order)) == CUBLAS_STATUS_SUCCESS &&
           cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                            sizeof(count)) == CUBLAS_STATUS_SUCCESS &&
           cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &stride, sizeof(stride)) == CUBLAS_STATUS_SUCCESS;
  }
  // aux: the epilogue's auxiliary matrix (ld, batch stride) in D's type;
  // bias: bias (or bias-gradient output) pointer of type bias_type, bias_stride
  // apart over the batch.
  LtGemm(cublasLtEpilogue_t epi, cublasLtOrder_t order, bool ta_, bool tb_, const Mat& ma,
         const Mat& mb, const Mat& md, int batch, cudaDataType dt, void* bias,
         cudaDataType bias_type, int64_t bias_stride, void* aux, int64_t aux_ld,
         int64_t aux_stride) {
    if (cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) {
      why = "desc";
      return;
    }
    const cublasOperation_t ta = ta_ ? CUBLAS_OP_T : CUBLAS_OP_N,
                            tb = tb_ ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
    if (bias != nullptr) {
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                     sizeof(bias_type));
      if (bias_stride > 0)
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride,
                                       sizeof(bias_stride));
    }
    if (aux != nullptr) {
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                     sizeof(aux));
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                     sizeof(aux_ld));
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE,
                                     &aux_stride, sizeof(aux_stride));
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &dt,
                                     sizeof(dt));
    }
    if (!layout(&la, dt, ma, order, batch) || !layout(&lb, dt, mb, order, batch) ||
        !layout(&ld, dt, md, order, batch)) {
      why = "layout";
      return;
    }
    const size_t ws = at::cuda::getCUDABlasLtWorkspaceSize();
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof(ws));
    int found = 0;
    const auto s = cublasLtMatmulAlgoGetHeuristic(at::cuda::getCurrentCUDABlasLtHandle(), op, la,
                                                  lb, ld, ld, pref, 1, &heur, &found);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
      why = std::string("no algorithm (status ") + std::to_string(int(s)) + ")";
      return;
    }
    a = ma.p;
    b = mb.p;
    d = const_cast<void*>(md.p);
    ok = true;
  }
  // The row-major form on [B, C, N] tensors (CUBLASLT_ORDER_ROW): D [B][M, N] =
  // op(W) [M, K] * X [B][K, N], W shared by the batch (batch stride 0), W [M, K]
  // or [K, M] when trans_a; bias [M] (or the bias gradient [B, M] for BGRAD);
  // aux [B, M, N].
  LtGemm(cublasLtEpilogue_t epi, const torch::Tensor& w, bool trans_a, const torch::Tensor& x,
         torch::Tensor& out, void* bias, const torch::Tensor& aux)
      : LtGemm(epi, CUBLASLT_ORDER_ROW, trans_a, false,
               Mat{w.data_ptr(), trans_a ? x.size(1) : out.size(1),
                   trans_a ? out.size(1) : x.size(1), w.stride(0), 0},
               Mat{x.data_ptr(), x.size(1), x.size(2), x.stride(1), x.stride(0)},
               Mat{out.data_ptr(), out.size(1), out.size(2), out.stride(1), out.stride(0)},
               static_cast<int>(x.size(0)), lt_type(x.scalar_type()), bias,
               lt_type(x.scalar_type()),
               epi == CUBLASLT_EPILOGUE_DGELU_BGRAD && x.size(0) > 1 ? out.size(1) : 0,
               aux.defined() ? aux.data_ptr() : nullptr, aux.defined() ? aux.stride(1) : 0,
               aux.defined() ? aux.stride(0) : 0) {}
  bool run() {
    const float alpha = 1.f, beta = 0.f;
    const auto s = cublasLtMatmul(
        at::cuda::getCurrentCUDABlasLtHandle(), op, &alpha, a, la, b, lb, &beta, d, ld, d, ld,
        &heur.algo, at::cuda::getCUDABlasLtWorkspace(), at::cuda::getCUDABlasLtWorkspaceSize(),
        c10::cuda::getCurrentCUDAStream().stream());
    if (s != CUBLAS_STATUS_SUCCESS) {
      why = std::string("matmul status ") + std::to_string(int(s));
      return false;
    }
    return true;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cuBLASLt epilogues on the channel-first MLP layers"};
  int64_t batch = 8, grid = 1024;
  int reps = 10;
  std::string dtypes = "float,bf16";
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--grid", grid, "grid side: N = grid^2")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "timed repetitions (median)")->check(CLI::PositiveNumber);
  app.add_option("--dtypes", dtypes, "float, bf16, half");
  CLI11_PARSE(app, argc, argv);
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "mlp_epilogue_bench: no CUDA device\n");
    return 77;
  }
  const int64_t n = grid * grid;
  // The seed FNO's MLP layers: lifting 3 -> 64 -> 32, projection 32 -> 64 -> 1.
  struct Layer {
    const char* name;
    int64_t cin, cout;
  };
  const std::vector<Layer> layers{
      {"lift.0", 3, 64}, {"lift.1", 64, 32}, {"proj.0", 32, 64}, {"proj.1", 64, 1}};
  std::printf("shape [%ld, C, %ld^2]\n", long(batch), long(grid));
  std::printf("%-5s %-7s %-34s %9s %s\n", "dtype", "layer", "path", "ms", "check");
  const auto row = [](const std::string& dt, const char* layer, const char* path, double ms,
                      const std::string& check) {
    std::printf("%-5s %-7s %-34s %9.3f %s\n", dt.c_str(), layer, path, ms, check.c_str());
    std::fflush(stdout);
  };
  // One cuBLASLt row: why the GEMM cannot run, else its time and check() run
  // after it (or what LtGemm noted about it).
  const auto time_lt = [&](const std::string& dt, const char* layer, const char* path, LtGemm& g,
                           const std::function<std::string()>& check) {
    if (!g.ok) {
      row(dt, layer, path, 0, g.why);
      return;
    }
    const double t = median_ms(reps, [&] { g.run(); });
    row(dt, layer, path, t, g.why.empty() ? check() : g.why);
  };
  std::stringstream list(dtypes);
  for (std::string dt; std::getline(list, dt, ',');) {
    const auto st = dt == "bf16" ? torch::kBFloat16 : dt == "half" ? torch::kHalf : torch::kFloat;
    const auto o = torch::TensorOptions().device(torch::kCUDA).dtype(st);
    for (const auto& l : layers) {
      auto x = torch::randn({batch, l.cin, n}, o);
      auto w = (torch::rand({l.cout, l.cin}, o) * 2 - 1) / std::sqrt(double(l.cin));
      auto b = (torch::rand({l.cout}, o) * 2 - 1) / std::sqrt(double(l.cin));
      const auto wb = w.unsqueeze(0).expand({batch, -1, -1});
      torch::Tensor ref;
      const double t_ref = median_ms(reps, [&] {
        ref = torch::baddbmm(b.view({1, -1, 1}), wb, x);
      });
      row(dt, l.name, "torch baddbmm (bias)", t_ref, "");
      {
        auto y = torch::empty_like(ref);
        LtGemm g(CUBLASLT_EPILOGUE_BIAS, w, false, x, y, b.data_ptr(), torch::Tensor());
        time_lt(dt, l.name, "lt BIAS", g,
                [&] { return "rel err " + std::to_string(rel_err(y, ref)); });
      }
      torch::Tensor gref;
      const double t_gelu = median_ms(reps, [&] {
        gref = torch::gelu(torch::baddbmm(b.view({1, -1, 1}), wb, x));
      });
      row(dt, l.name, "torch baddbmm + gelu(erf)", t_gelu, "");
      for (const bool aux_out : {false, true}) {
        auto y = torch::empty_like(ref);
        auto aux = aux_out ? torch::empty_like(ref) : torch::Tensor();
        LtGemm g(aux_out ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS, w, false,
                 x, y, b.data_ptr(), aux);
        const char* name = aux_out ? "lt GELU_AUX_BIAS" : "lt GELU_BIAS";
        time_lt(dt, l.name, name, g, [&] {
          std::string check =
              "vs erf GELU: rel " + std::to_string(rel_err(y, gref)) + ", max abs " +
              std::to_string(
                  (y.to(torch::kFloat) - gref.to(torch::kFloat)).abs().max().item<float>()) +
              "; vs tanh GELU: rel " + std::to_string(rel_err(y, torch::gelu(ref, "tanh")));
          if (aux_out) check += "; aux rel " + std::to_string(rel_err(aux, ref));
          return check;
        });
      }
      // Backward of a layer followed by GELU: dh = GELU'(h) * (W^T dy), db = sum dh.
      // Here W: [cout, cin] is the next layer's weight seen from its input side:
      // dy: [B, cout, N] -> dh: [B, cin, N], h: [B, cin, N].
      {
        auto dy = torch::randn({batch, l.cout, n}, o);
        auto h = torch::randn({batch, l.cin, n}, o);
        const auto wt = w.t().unsqueeze(0).expand({batch, -1, -1});
        torch::Tensor dh_ref, db_ref;
        const double t = median_ms(reps, [&] {
          dh_ref = torch::bmm(wt, dy);
          at::gelu_backward_out(dh_ref, dh_ref, h);
          db_ref = dh_ref.sum(torch::IntArrayRef{0, 2}, false, torch::kFloat);
        });
        row(dt, l.name, "torch bmm + gelu_backward + sum", t, "");
        auto dh = torch::empty_like(h);
        auto db = torch::empty({batch, l.cin}, o);
        LtGemm g(CUBLASLT_EPILOGUE_DGELU_BGRAD, w, true, dy, dh, db.data_ptr(), h);
        time_lt(dt, l.name, "lt DGELU_BGRAD", g, [&] {
          return "dh vs erf: rel " + std::to_string(rel_err(dh, dh_ref)) + "; db rel " +
                 std::to_string(rel_err(db.to(torch::kFloat).sum(0), db_ref));
        });
      }
      // The column-major view of the same tensors (CUBLASLT_ORDER_COL, as cuBLAS
      // runs libfno's GEMMs): D' = X^T W^T, [N, Cout] per batch entry, so the
      // channels are D's columns: no per-channel bias epilogue, but GELU (no
      // bias) and the bias gradients of the weight-gradient GEMMs (BGRADB).
      {
        const cudaDataType ty = lt_type(st);
        torch::Tensor h;
        const double th = median_ms(reps, [&] { h = torch::bmm(wb, x); });
        row(dt, l.name, "torch bmm (no bias)", th, "");
        torch::Tensor gh;
        const double tg = median_ms(reps, [&] { gh = torch::gelu(torch::bmm(wb, x)); });
        row(dt, l.name, "torch bmm + gelu(erf)", tg, "");
        auto y = torch::empty_like(h), aux = torch::empty_like(h);
        LtGemm g(CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_ORDER_COL, false, false,
                 Mat{x.data_ptr(), n, l.cin, x.stride(1), x.stride(0)},
                 Mat{w.data_ptr(), l.cin, l.cout, w.stride(0), 0},
                 Mat{y.data_ptr(), n, l.cout, y.stride(1), y.stride(0)}, static_cast<int>(batch),
                 ty, nullptr, ty, 0, aux.data_ptr(), aux.stride(1), aux.stride(0));
        time_lt(dt, l.name, "lt col GELU_AUX (no bias)", g, [&] {
          return "vs erf GELU: rel " + std::to_string(rel_err(y, gh)) + ", max abs " +
                 std::to_string(
                     (y.to(torch::kFloat) - gh.to(torch::kFloat)).abs().max().item<float>()) +
                 "; aux rel " + std::to_string(rel_err(aux, h));
        });
        // Weight gradient of this layer over one batch entry (libfno's backward
        // runs entry by entry on long grids): gW [Cout, Cin] = dy x^T and
        // gb [Cout] = sum_n dy, in fp32.
        auto dy = torch::randn({1, l.cout, n}, o);
        torch::Tensor gw_ref, gb_ref;
        const double tw = median_ms(reps, [&] {
          gw_ref = at::mm(dy[0], x[0].t(), torch::kFloat);
          gb_ref = dy.sum(torch::IntArrayRef{0, 2}, false, torch::kFloat);
        });
        row(dt, l.name, "torch mm (wgrad) + sum (bgrad)", tw, "");
        // D = gW^T [Cin, Cout] (col-major, ld Cin) = op(A) [Cin, N] * B [N, Cout]:
        // A = x_b as [N, Cin] col-major, transposed; B = dy_b [N, Cout] col-major.
        auto gw = torch::empty({l.cout, l.cin}, o), gb = torch::empty({l.cout}, o);
        LtGemm gg(CUBLASLT_EPILOGUE_BGRADB, CUBLASLT_ORDER_COL, true, false,
                  Mat{x.data_ptr(), n, l.cin, x.stride(1), 0},
                  Mat{dy.data_ptr(), n, l.cout, dy.stride(1), 0},
                  Mat{gw.data_ptr(), l.cin, l.cout, l.cin, 0}, 1, ty, gb.data_ptr(), ty, 0, nullptr,
                  0, 0);
        time_lt(dt, l.name, "lt col BGRADB (wgrad + bgrad)", gg, [&] {
          return "gW rel " + std::to_string(rel_err(gw, gw_ref)) + ", gb rel " +
                 std::to_string(rel_err(gb, gb_ref));
        });
      }
    }
  }
  return 0;
}
