// `powerinfer bench`: the report in three formats, all carrying the same data.
//  - md:   a header (date, machine, kernel and probe ISA, load average, build), the models
//          table, the read-probe table and the results table (llama-bench style);
//  - json: one object: machine, build, options, probe, models and results (every
//          repetition's tokens/s and every probe pass included);
//  - csv:  one line per result with the model and machine columns repeated (probe-only runs:
//          one line per thread count).
// Sizes in the tables are MiB (2^20 bytes) and GiB; bandwidths are GB/s (1e9 bytes/s).
#pragma once

#include <string>

#include "bench_runner.h"

namespace pi::cli {

std::string format_markdown(const BenchReport& r);
std::string format_json(const BenchReport& r);
std::string format_csv(const BenchReport& r);

}  // namespace pi::cli
