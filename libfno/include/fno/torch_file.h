// Reading torch.save files (the zip format) without Python.
//
// LibTorch's own torch::pickle_load cannot read what Python users save most:
// it turns a collections.OrderedDict (every nn.Module.state_dict()) into None,
// and it rejects any Python global it does not know (neuraloperator stores
// torch._C._nn.gelu and its SpectralConv class in the state dict's
// "_metadata"). This reader runs the pickle opcodes torch.save emits
// (protocols 2 to 5) and maps what is data onto c10::IValue:
//   None, bool, int, float, str, bytes (as str), tuple, list, dict -> IValue
//   tensors (torch._utils._rebuild_tensor_v2/_rebuild_parameter)   -> CPU tensor
//   any other Python object, function or class                     -> None
// Tensors keep their saved strides: they are views into their storage.
// Every read is bounds-checked; malformed input throws std::runtime_error whose
// message starts with the file name.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>

namespace fno {

/// The object stored in a torch.save file.
c10::IValue read_torch_file(const std::string& path);

}  // namespace fno
