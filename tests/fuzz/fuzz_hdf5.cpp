// libFuzzer target: arbitrary bytes as an HDF5 data file.
#include <fno_data/darcy.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fno::fuzz::write_input(data, size, ".h5");
  try {
    fno::data::load_hdf5(path);
  } catch (const std::runtime_error& e) {
    fno::fuzz::check_one_line(e.what());
  }
  return 0;
}
