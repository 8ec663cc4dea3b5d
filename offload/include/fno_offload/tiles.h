// Full-size tensors kept as tiles in pinned host memory, streamed over the
// link by the offloader's copy engine: what a tiled step (fno/tiled.h) keeps
// of a grid too large for the GPU.
//
//   put(t, tile)   copies tile t to the host on the device-to-host stream,
//                  after the compute that made it; the GPU copy is released
//                  when the copy is done (forward waits when more than the
//                  offloader's window is in flight, unless the caller holds
//                  the tile itself: `held`)
//   expect(order)  names the tiles the next gets read, in order: they come
//                  back on the host-to-device stream `prefetch_tiles` ahead
//   get(t)         tile t on the GPU, the compute stream ordered after its
//                  reload (fetched on demand, and counted so, if not ahead)
//
// Both directions run at once. The bytes, the copy engines' busy times, their
// overlap and the link floor land in the offloader's StepStats (begin_step /
// end_step). Host slots live across steps; optional bf16 storage
// (OffloadOptions::compress) halves the bytes of float32 tiles.
#pragma once

#include <fno_offload/offload.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fno::offload {

class HostTiles {
 public:
  /// Tiles moved by `offloader`'s copy engine (which must be active);
  /// `name` appears in errors.
  HostTiles(Offloader& offloader, std::string name, int64_t prefetch_tiles = 2);
  ~HostTiles();
  HostTiles(const HostTiles&) = delete;
  HostTiles& operator=(const HostTiles&) = delete;

  /// Copies tile t out (replacing what it held). Throws BudgetError when the
  /// host memory limit (or the pinned memory to be had) cannot hold it.
  /// `held`: the caller keeps `tile` alive past the copy's likely end (a
  /// tiled step's keep_latest), so forward is not held back for it; its
  /// bytes still count in flight for the next puts.
  void put(int64_t t, const at::Tensor& tile, bool held = false);
  /// Tile t on its device, usable on the current stream.
  at::Tensor get(int64_t t);
  /// The next gets, in order.
  /// `ahead` >= 0: at most that many of them come back before the first get
  /// (an announcement a sweep early, which may cost no more GPU memory).
  void expect(const std::vector<int64_t>& order, int64_t ahead = -1);
  /// Forgets the tiles (the host memory stays for the next ones).
  void clear();
  /// Pinned bytes held.
  int64_t host_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

}  // namespace fno::offload
