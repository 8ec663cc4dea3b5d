// libFuzzer target: arbitrary bytes as a torch.save file. The loaders may only
// answer with std::runtime_error (a one-line message); anything else, a crash
// or a sanitizer report is a finding.
#include <fno/serialize.h>
#include <fno_data/darcy.h>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fno::fuzz::write_input(data, size, ".pt");
  try {
    fno::load_tensor_dict(path);
  } catch (const std::runtime_error& e) {
    fno::fuzz::check_one_line(e.what());
  }
  try {
    fno::data::load_torch_file(path);
  } catch (const std::runtime_error& e) {
    fno::fuzz::check_one_line(e.what());
  }
  return 0;
}
