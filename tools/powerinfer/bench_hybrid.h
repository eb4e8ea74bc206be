// `powerinfer bench` on a GPU-like device (--device sim|cuda): the rates of the device and a
// roofline-style model of the hybrid step, to set measured tokens/s against.
//
// The model, per generated token and layer (the plan's expected bytes, PlacementInfo):
//   attention on the device:  dense/R_dev, then the FFN: with cold neurons
//                             2 hand-offs + max(cold/R_scat, hot/R_dev), else hot/R_dev
//   attention on the CPU:     dense/R_cpu, then the FFN: with hot neurons
//                             max(cold/R_scat, 2 hand-offs + hot/R_dev), else cold/R_scat
// (dense = the layer's attention, norms and predictor weights plus its KV cache for the
// positions attended), plus one hand-off wherever the residual stream changes sides, and the
// head at the rate of its side. R_cpu: the CPU's matrix-vector rate over the model's weight
// type on the row's threads (measure_device("cpu"), capped by the read probe); R_scat: R_cpu
// times the probe's scattered/sequential ratio (the cold rows are scattered; cold experts and
// experts kept on the CPU are whole matrices, read at R_cpu); R_dev, the
// hand-off time and the launch cost of one op (times the ops the device was given per token):
// measured on the device (measure_device). The FFN halves overlap, nothing else does.
#pragma once

#include <string>

#include "core/error.h"
#include "powerinfer/placement.h"
#include "tensor/dtype.h"

namespace pi::cli {

struct DeviceRates {
  double read_gbps = 0;   // the device's matrix-vector product over `type` weights
  double handoff_us = 0;  // one host <-> device hand-off: a 16 KiB copy and the wait for it
  double launch_us = 0;   // one small op submitted back to back (a kernel launch)
};

// Measures `device` (a registry name, options included) with n_threads kernel threads.
Result<DeviceRates> measure_device(const std::string& device, int n_threads, DType type);

struct CpuRates {
  double seq_gbps = 0;        // the read probe
  double scattered_gbps = 0;  // its scattered passes (rows of kScatterChunkBytes)
};

// Seconds per generated token the model expects (see the file comment); kv_cells: positions
// each layer's attention reads, on average over the timed tokens; ops_per_token: the ops the
// executor gives the device per token (counted by the device), each costing a launch.
double hybrid_model_seconds(const PlacementInfo& p, const CpuRates& cpu, const DeviceRates& dev,
                            double kv_cells, double ops_per_token);

}  // namespace pi::cli
