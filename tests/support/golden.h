// Test helpers: golden files made by tests/golden/make_golden.py with the real
// neuraloperator 2.0.0, and error measures.
#pragma once

#include <fno/serialize.h>

#include <torch/types.h>

#include <functional>
#include <string>

namespace fno::test {

/// Absolute path of a file in tests/golden.
std::string golden_path(const std::string& name);
/// Absolute path for a test output file (in the build tree).
std::string out_path(const std::string& name);
/// The tensors of a golden file, loaded once.
const TensorDict& golden(const std::string& file);
/// One tensor of a golden file; fails the test naming file and key if absent.
torch::Tensor golden_tensor(const std::string& file, const std::string& key);
/// ||a - b|| / ||b|| in float64 (complex-aware); 0 when both are zero.
double rel_err(const torch::Tensor& a, const torch::Tensor& b);

/// A loopback TCP port the kernel just gave out, free again (a rendezvous's).
int free_port();

/// Writes / reads a whole file as bytes.
void write_bytes(const std::string& path, const std::string& bytes);
std::string read_bytes(const std::string& path);

/// `fn` must throw a std::runtime_error whose message is one line that starts
/// with `path` and contains `expected`.
void check_one_line_error(const std::function<void()>& fn, const std::string& path,
                          const std::string& expected);

}  // namespace fno::test
