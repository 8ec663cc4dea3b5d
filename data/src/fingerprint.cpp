// fno_data/fingerprint.h
#include <fno_data/fingerprint.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

namespace fno::data {

FileFingerprint file_fingerprint(const std::string& path) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"),
                                                          &std::fclose);
  if (!f) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  FileFingerprint fp;
  fp.hash = 0xcbf29ce484222325ULL;  // FNV-1a's offset basis and prime
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  std::vector<unsigned char> buf(1 << 20);
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) {
    uint64_t h = fp.hash;
    for (size_t i = 0; i < n; ++i) h = (h ^ buf[i]) * kPrime;
    fp.hash = h;
    fp.size += n;
  }
  if (std::ferror(f.get()))
    throw std::runtime_error(path + ": read failed: " + std::strerror(errno));
  return fp;
}

std::string to_string(const FileFingerprint& f) {
  char text[64];
  std::snprintf(text, sizeof text, "%" PRIu64 " bytes, fnv1a64 %016" PRIx64, f.size, f.hash);
  return text;
}

bool parse_fingerprint(const std::string& text, FileFingerprint& f) {
  uint64_t size = 0, hash = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%" SCNu64 " bytes, fnv1a64 %" SCNx64 "%c", &size, &hash, &tail) !=
      2) {
    return false;
  }
  f.size = size;
  f.hash = hash;
  return true;
}

}  // namespace fno::data
