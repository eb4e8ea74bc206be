// --device and `powerinfer devices`: the list, the same text on every device, clear errors for
// an unknown device and for a budget the model does not fit; `devices --probe` on a device
// without a memory probe of its own.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "cli/run_command.h"
#include "model/tiny_model.h"

namespace {

using pi::testing::run_command;

const std::string kBin = std::string(PI_BIN_DIR) + "/powerinfer";
const std::string kModel = std::string(PI_SOURCE_DIR) + "/models/kjv-relu/kjv-relu.pwri.gguf";

std::string stdout_of(const std::string& args) {
  auto r = run_command("(" + kBin + " " + args + " 2>/dev/null)");
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  return r.output;
}

TEST(CliDevices, ListsEveryDevice) {
  const std::string out = stdout_of("devices");
  for (const char* name : {"cpu ", "ref ", "sim "})
    EXPECT_NE(out.find(name), std::string::npos) << out;
  EXPECT_NE(out.find("simulated GPU"), std::string::npos) << out;
}

TEST(CliDevices, EveryDeviceGeneratesTheSameText) {
  const std::string args =
      "run -m " + kModel + " -p \"And God said\" -n 12 --temp 0 -t 2 --no-warmup";
  const std::string cpu = stdout_of(args + " --device cpu");
  EXPECT_EQ(stdout_of(args + " --device sim"), cpu);
  // The reference kernels round differently in the last bits; the greedy text of the bundled
  // model has enough margin to be the same.
  EXPECT_EQ(stdout_of(args + " --device ref"), cpu);
  EXPECT_GT(cpu.size(), 12u);
  const std::string batched =
      "batched -m " + kModel + " -p \"And God said\" -np 2 -n 6 --temp 0 -t 2";
  EXPECT_EQ(stdout_of(batched + " --device sim"), stdout_of(batched + " --device cpu"));
}

// Hybrid runs (what fits the budget on the simulated GPU, the rest on the CPU) print the plan
// and the device memory at load and generate the CPU's greedy text at every budget.
TEST(CliDevices, HybridRunsAtEveryBudgetGenerateTheCpuText) {
  const std::string args = "run -m " + kModel + " -p \"And God said\" -n 12 --temp 0 -t 1 --no-warmup" +
                           " --gpu-index " + pi::testing::temp_path("cli_hybrid.gpuidx");
  const std::string cpu = stdout_of(args);
  for (const char* budget : {"0", "0.001", "0.003", "0.006", "1"}) {
    auto r = run_command(kBin + " " + args + " --device sim --vram-budget " + budget);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("hybrid: sim + cpu"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("device memory (sim)"), std::string::npos) << r.output;
    EXPECT_EQ(stdout_of(args + " --device sim --vram-budget " + budget), cpu) << budget;
  }
}

TEST(CliDevices, BadBudgetsAreClearErrors) {
  const std::string args = "run -m " + kModel + " -p x -n 1 --device sim --vram-budget ";
  for (const auto& [value, message] :
       {std::pair{"-1", "negative"}, {"abc", "not a number"}, {"nan", "NaN"}, {"1e30", "1 PiB"}}) {
    auto r = run_command(kBin + " " + args + value);
    EXPECT_EQ(r.exit_code, 1) << value << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << value << "\n" << r.output;
  }
  // On the CPU a budget means nothing: a warning, and the run goes on.
  auto cpu = run_command(kBin + " run -m " + kModel + " -p x -n 1 --vram-budget 1");
  EXPECT_EQ(cpu.exit_code, 0) << cpu.output;
  EXPECT_NE(cpu.output.find("ignored on cpu"), std::string::npos) << cpu.output;
  // bench rows per budget need a GPU-like device.
  auto bench = run_command(kBin + " bench -m " + kModel + " -n 2 -p 0 --vram-budget 1");
  EXPECT_EQ(bench.exit_code, 1) << bench.output;
  EXPECT_NE(bench.output.find("--device sim|cuda"), std::string::npos) << bench.output;
}

TEST(CliDevices, BenchRowsPerBudgetReportTheTrafficAndTheModel) {
  auto r = run_command("(" + kBin + " bench -m " + kModel +
                       " -p 0 -n 4 -r 1 -t 1 --warmup-gen 0 --probe-mib 64 --probe-passes 1"
                       " --device sim:copy_us=5 --vram-budget 0,0.004,1 -o json 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* key : {"\"hybrid\"", "\"bytes_h2d_per_token\"", "\"bytes_d2h_per_token\"",
                          "\"model_ts\"", "\"device_bytes\"", "\"layers_on_device\"",
                          "\"device_memory\""})
    EXPECT_NE(r.output.find(key), std::string::npos) << key << "\n" << r.output;
}

TEST(CliDevices, ProbeOfAHostDeviceSaysWhereTheHostsIs) {
  auto r = run_command(kBin + " devices --probe --device sim --probe-mib 1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("powerinfer bench --probe"), std::string::npos) << r.output;
  auto bad = run_command(kBin + " devices --probe --device cpu --probe-mib 0");
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("--probe-mib"), std::string::npos) << bad.output;
}

TEST(CliDevices, UnknownDeviceIsAClearError) {
  auto r = run_command(kBin + " run -m " + kModel + " -p x -n 1 --device gpu7");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("unknown device 'gpu7'"), std::string::npos) << r.output;
}

}  // namespace
