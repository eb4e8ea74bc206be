// --device and `powerinfer devices`: the list, the same text on every device, clear errors for
// an unknown device and for a budget the model does not fit; `devices --probe` on a device
// without a memory probe of its own.
#include <gtest/gtest.h>

#include <string>

#include "cli/run_command.h"

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
