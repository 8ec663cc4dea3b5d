// The engine: an FNO run under a plan, below the training loop (train/) and
// above the model (libfno), offload/'s stages and planner. Two entry points:
//
//   A step under a plan (OffloadedStep::forward_backward, offload_step.h):
//   loss(model(x), y).backward() within a memory budget or a fixed policy:
//   the whole grid, micro-batches, stages offloaded to pinned host memory or
//   recomputed (offload/), or spatial tiles of rows (libfno's TiledStep, with
//   block inputs on the GPU, in pinned host memory or remade; tiled_plan.h).
//   `auto` profiles one batch entry, ranks the plans by the planner's model
//   and measures the best few (offload_step.h says how).
//
//   A forward under a plan (forward_under_plan, forward_plan.h): model(x)
//   without gradients within a budget, the whole grid in batches or
//   micro-batches, or tile by tile; choose_forward_plan picks the plan for an
//   input's shape, choose_streamed_plan a streamed one (rows from a source,
//   into a sink). OffloadedStep::forward (evaluation) runs it under the
//   training plan at the training grid and under a plan chosen for the grid
//   elsewhere; fno_predict runs it under the plan chosen for its inputs.
//
// Both work tile by tile where the plan has tiles: each block's kept spectrum
// is a sum over row tiles, which is what lets several ranks share a sample.
// Beside them: the recurrent rollout (rollout.h) and CUDA graphs of a step
// (graphed_step.h). Nothing here knows the training loop, its config or the
// programs' flags: advice comes back as data (StepMemoryAdvice,
// ForwardBudgetError::detail) for the programs to word.
#pragma once

#include <fno_engine/forward_plan.h>
#include <fno_engine/graphed_step.h>
#include <fno_engine/offload_step.h>
#include <fno_engine/rollout.h>
#include <fno_engine/tiled_plan.h>
#include <fno_engine/tiled_runner.h>
