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

namespace {

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "mlp_epilogue_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

double median_ms(int reps, const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t start, stop;
  ck(cudaEventCreate(&start), "event");
  ck(cudaEventCreate(&stop), "event");
  std::vector<double> ms;
  const auto stream = c10::cuda::getCurrentCUDAStream().stream();
  for (int i = 0; i < reps; ++i) {
    ck(cudaEventRecord(start, stream), "record");
    f();
    ck(cudaEventRecord(stop, stream), "record");
    ck(cudaEventSynchronize(stop), "sync");
    float t = 0;
    ck(cudaEventElapsedTime(&t, start, stop), "elapsed");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double rel_err(const torch::Tensor& a, const torch::Tensor& b) {
  const auto d = (a.to(torch::kDouble) - b.to(torch::kDouble)).norm().item<double>();
  return d / std::max(b.to(torch::kDouble).norm().item<double>(), 1e-300);
}

cudaDataType lt_type(torch::ScalarType t) {
  return t == torch::kBFloat16 ? CUDA_R_16BF : t == torch::kHalf ? CUDA_R_16F : CUDA_R_32F;
}

// One cuBLASLt matmul: D [B][M, N] = op(A) [M, K] * X [B][K, N], every matrix
// row-major (CUBLASLT_ORDER_ROW), A shared by the batch (batch stride 0), with
// an epilogue. A is [M, K], or [K, M] when trans_a. Returns a status string.
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
  static bool layout(cublasLtMatrixLayout_t* l, cudaDataType t, int64_t rows, int64_t cols,
                     int64_t lead, int batch, int64_t stride) {
    if (cublasLtMatrixLayoutCreate(l, t, rows, cols, lead) != CUBLAS_STATUS_SUCCESS) return false;
    const cublasLtOrder_t order = CUBLASLT_ORDER_ROW;
    const int32_t count = batch;
    return cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order,
                                            sizeof(order)) == CUBLAS_STATUS_SUCCESS &&
           cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                            sizeof(count)) == CUBLAS_STATUS_SUCCESS &&
           cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &stride, sizeof(stride)) == CUBLAS_STATUS_SUCCESS;
  }
  // w: [M, K] (or [K, M] when trans_a); x: [B, K, N]; out: [B, M, N]; bias [M]
  // (or the bias gradient [B, M] for BGRAD); aux [B, M, N].
  LtGemm(cublasLtEpilogue_t epi, const torch::Tensor& w, bool trans_a, const torch::Tensor& x,
         torch::Tensor& out, void* bias, const torch::Tensor& aux) {
    const auto st = x.scalar_type();
    const cudaDataType dt = lt_type(st);
    const int batch = static_cast<int>(x.size(0));
    const int64_t k = x.size(1), n = x.size(2), m = out.size(1);
    const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    const cudaDataType scale = CUDA_R_32F;
    if (cublasLtMatmulDescCreate(&op, compute, scale) != CUBLAS_STATUS_SUCCESS) {
      why = "desc";
      return;
    }
    const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
    if (bias != nullptr) {
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dt, sizeof(dt));
      if (epi == CUBLASLT_EPILOGUE_DGELU_BGRAD && batch > 1) {
        const int64_t bs = m;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bs,
                                       sizeof(bs));
      }
    }
    if (aux.defined()) {
      void* p = aux.data_ptr();
      const int64_t lda = aux.stride(1), bsa = aux.stride(0);
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p, sizeof(p));
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &lda, sizeof(lda));
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &bsa,
                                     sizeof(bsa));
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &dt,
                                     sizeof(dt));
    }
    const int64_t wr = trans_a ? k : m, wc = trans_a ? m : k;
    if (!layout(&la, dt, wr, wc, w.stride(0), batch, 0) ||
        !layout(&lb, dt, k, n, x.stride(1), batch, x.stride(0)) ||
        !layout(&ld, dt, m, n, out.stride(1), batch, out.stride(0))) {
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
    a = w.data_ptr();
    b = x.data_ptr();
    d = out.data_ptr();
    ok = true;
  }
  bool run() {
    const float alpha = 1.f, beta = 0.f;
    const auto s = cublasLtMatmul(at::cuda::getCurrentCUDABlasLtHandle(), op, &alpha, a, la, b, lb,
                                  &beta, d, ld, d, ld, &heur.algo, at::cuda::getCUDABlasLtWorkspace(),
                                  at::cuda::getCUDABlasLtWorkspaceSize(),
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
      const double t_ref = median_ms(reps, [&] { ref = torch::baddbmm(b.view({1, -1, 1}), wb, x); });
      row(dt, l.name, "torch baddbmm (bias)", t_ref, "");
      {
        auto y = torch::empty_like(ref);
        LtGemm g(CUBLASLT_EPILOGUE_BIAS, w, false, x, y, b.data_ptr(), torch::Tensor());
        if (!g.ok) {
          row(dt, l.name, "lt BIAS", 0, g.why);
        } else {
          const double t = median_ms(reps, [&] { g.run(); });
          row(dt, l.name, "lt BIAS", t,
              g.why.empty() ? "rel err " + std::to_string(rel_err(y, ref)) : g.why);
        }
      }
      torch::Tensor gref;
      const double t_gelu = median_ms(
          reps, [&] { gref = torch::gelu(torch::baddbmm(b.view({1, -1, 1}), wb, x)); });
      row(dt, l.name, "torch baddbmm + gelu(erf)", t_gelu, "");
      for (const bool aux_out : {false, true}) {
        auto y = torch::empty_like(ref);
        auto aux = aux_out ? torch::empty_like(ref) : torch::Tensor();
        LtGemm g(aux_out ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS, w, false,
                 x, y, b.data_ptr(), aux);
        const char* name = aux_out ? "lt GELU_AUX_BIAS" : "lt GELU_BIAS";
        if (!g.ok) {
          row(dt, l.name, name, 0, g.why);
          continue;
        }
        const double t = median_ms(reps, [&] { g.run(); });
        std::string check = g.why;
        if (check.empty()) {
          check = "vs erf GELU: rel " + std::to_string(rel_err(y, gref)) + ", max abs " +
                  std::to_string((y.to(torch::kFloat) - gref.to(torch::kFloat)).abs().max().item<float>()) +
                  "; vs tanh GELU: rel " +
                  std::to_string(rel_err(y, torch::gelu(ref, "tanh")));
          if (aux_out) check += "; aux rel " + std::to_string(rel_err(aux, ref));
        }
        row(dt, l.name, name, t, check);
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
        if (!g.ok) {
          row(dt, l.name, "lt DGELU_BGRAD", 0, g.why);
        } else {
          const double tl = median_ms(reps, [&] { g.run(); });
          std::string check = g.why;
          if (check.empty()) {
            check = "dh vs erf: rel " + std::to_string(rel_err(dh, dh_ref)) + "; db rel " +
                    std::to_string(rel_err(db.to(torch::kFloat).sum(0), db_ref));
          }
          row(dt, l.name, "lt DGELU_BGRAD", tl, check);
        }
      }
    }
  }
  return 0;
}
