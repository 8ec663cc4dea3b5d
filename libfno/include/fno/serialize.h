// State dicts that move between this library and PyTorch/neuraloperator.
//
// Files are torch.save's zip format: a file written by
//   torch.save(model.state_dict(), path)            (neuraloperator, Python)
// loads with load_tensor_dict(), and a file written by save_tensor_dict()
// loads in Python with torch.load(path, weights_only=True) followed by
// model.load_state_dict(...).
#pragma once

#include <torch/ordered_dict.h>
#include <torch/types.h>

#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace fno {

using TensorDict = torch::OrderedDict<std::string, torch::Tensor>;

/// Reads a dict of tensors saved by torch.save; non-tensor entries (such as
/// neuraloperator's "_metadata") are skipped. Throws std::runtime_error naming
/// the file on any failure.
TensorDict load_tensor_dict(const std::string& path);

/// The bytes of a torch.save zip file holding `tensors` as a plain dict.
std::vector<char> to_torch_save_bytes(const TensorDict& tensors);

/// Writes `tensors` (moved to the CPU) as a torch.save zip file, atomically:
/// a temporary file in the same directory, fsync, then rename.
void save_tensor_dict(const TensorDict& tensors, const std::string& path);

/// Like save_tensor_dict, adding "meta.sha1": a SHA-1 over every entry's name,
/// dtype, shape and bytes, so that a damaged file is detected on load.
void save_checkpoint_file(const TensorDict& tensors, const std::string& path);
/// The bytes save_checkpoint_file writes, for writing one snapshot to several
/// files (write_file_atomic) with one digest and one serialization.
std::vector<char> checkpoint_file_bytes(const TensorDict& tensors);

/// Loads a file written by save_checkpoint_file and verifies its SHA-1; throws
/// std::runtime_error naming the file when it is unreadable or damaged.
TensorDict load_checkpoint_file(const std::string& path);

/// The SHA-1 (hex) over the entries' names, dtypes, shapes and bytes, in order.
std::string tensor_dict_digest(const TensorDict& tensors);

/// The module's parameters and buffers, named as in Python ("a.b.c").
TensorDict state_dict(const torch::nn::Module& module);

/// Copies `tensors` into the module's parameters and buffers (no autograd).
/// With `strict`, missing and unexpected keys are errors. A shape or dtype
/// mismatch is always an error; the message names the key.
void load_state_dict(torch::nn::Module& module, const TensorDict& tensors, bool strict = true);

/// Writes bytes to `path` atomically (temporary file, fsync, rename).
void write_file_atomic(const std::string& path, const char* data, size_t size);

}  // namespace fno
