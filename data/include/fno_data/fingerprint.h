// A file's contents in a few words, for resumable runs that must go on with
// the same inputs (fno_datagen --resume's --initial, fno_train --resume's data
// files): its size and the 64-bit FNV-1a hash of all its bytes.
#pragma once

#include <cstdint>
#include <string>

namespace fno::data {

struct FileFingerprint {
  uint64_t size = 0;
  uint64_t hash = 0;  // FNV-1a, 64 bits, over every byte
  bool operator==(const FileFingerprint& o) const { return size == o.size && hash == o.hash; }
  bool operator!=(const FileFingerprint& o) const { return !(*this == o); }
};

/// Reads the whole file; throws std::runtime_error naming it when it cannot.
FileFingerprint file_fingerprint(const std::string& path);

/// "12345 bytes, fnv1a64 0123456789abcdef"; parse_fingerprint reads it back
/// (false when `text` is not one).
std::string to_string(const FileFingerprint& f);
bool parse_fingerprint(const std::string& text, FileFingerprint& f);

}  // namespace fno::data
