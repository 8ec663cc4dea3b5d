// The names the config uses for its choices (to_string of each enum); the
// schema (config_schema.cpp) reads a choice by these names.
#include <fno_train/config.h>

namespace fno {

std::string to_string(OptimizerName name) {
  switch (name) {
    case OptimizerName::kAdamW:
      return "adamw";
    case OptimizerName::kAdam:
      return "adam";
  }
  return "?";
}

std::string to_string(SchedulerName name) {
  switch (name) {
    case SchedulerName::kCosine:
      return "cosine";
    case SchedulerName::kStep:
      return "step";
    case SchedulerName::kPlateau:
      return "plateau";
    case SchedulerName::kNone:
      return "none";
  }
  return "?";
}

std::string to_string(LossName name) {
  switch (name) {
    case LossName::kH1:
      return "h1";
    case LossName::kL2:
      return "l2";
  }
  return "?";
}

std::string to_string(Progress progress) {
  switch (progress) {
    case Progress::kAuto:
      return "auto";
    case Progress::kBar:
      return "bar";
    case Progress::kPlain:
      return "plain";
    case Progress::kNone:
      return "none";
  }
  return "?";
}

std::string to_string(DataProblem problem) {
  switch (problem) {
    case DataProblem::kDarcy:
      return "darcy";
    case DataProblem::kNavierStokes:
      return "ns";
  }
  return "?";
}

std::string to_string(DataFormat format) {
  switch (format) {
    case DataFormat::kAuto:
      return "auto";
    case DataFormat::kWell:
      return "well";
    case DataFormat::kPdeBench:
      return "pdebench";
    case DataFormat::kPdeArena:
      return "pdearena";
  }
  return "?";
}

std::string to_string(DataStream stream) {
  switch (stream) {
    case DataStream::kAuto:
      return "auto";
    case DataStream::kOn:
      return "on";
    case DataStream::kOff:
      return "off";
  }
  return "?";
}

std::string to_string(NsMode mode) {
  switch (mode) {
    case NsMode::kSpaceTime:
      return "space_time";
    case NsMode::kRecurrent:
      return "recurrent";
  }
  return "?";
}

std::string to_string(data::NormalizerMode mode) {
  switch (mode) {
    case data::NormalizerMode::kChannel:
      return "channel";
    case data::NormalizerMode::kPointwise:
      return "pointwise";
    case data::NormalizerMode::kBenchmark:
      return "benchmark";
  }
  return "?";
}

std::string to_string(LossSpace space) {
  switch (space) {
    case LossSpace::kNormalized:
      return "normalized";
    case LossSpace::kDecoded:
      return "decoded";
  }
  return "?";
}

std::string to_string(SpectralInit init) {
  switch (init) {
    case SpectralInit::kNeuralOperator:
      return "neuraloperator";
    case SpectralInit::kPaper:
      return "paper";
  }
  return "?";
}

std::string to_string(PaddingMode mode) {
  switch (mode) {
    case PaddingMode::kSymmetric:
      return "symmetric";
    case PaddingMode::kOneSided:
      return "one_sided";
  }
  return "?";
}

}  // namespace fno
