// The FNO as a sequence of offload stages, for the offload policies and the planner:
//   lifting     grid embedding, lifting MLP, domain padding
//   block.i     FNO block i (i = 0 .. n_layers-1)
//   projection  unpadding, projection MLP
// Every stage treats each batch entry alone, so each may run in batch chunks,
// and each has a slim variant (fno/layers.h RecomputeCheapGuard) that the
// levels other than kKeep run.
#pragma once

#include <fno/fno.h>
#include <fno_offload/offload.h>

#include <cstdint>
#include <vector>

namespace fno {

/// Stages of `model` for inputs of spatial size `spatial`; run_stages(stages,
/// plan, x, offloader) equals model->forward(x).
std::vector<offload::Stage> fno_stages(FNO model, std::vector<int64_t> spatial);

}  // namespace fno
