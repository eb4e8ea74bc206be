// Tests for `powerinfer bench` on tiny synthetic models (powerinfer synth --preset tiny, dense
// and PWRI): the markdown, JSON and CSV reports are well formed and hold one row per point of
// the requested grid in order; byte counts are consistent (sparse reads fewer bytes than dense
// on the same file); the probe-only mode reports every thread count; bad input fails with a
// message naming the problem. No test looks at a timing beyond "it is a positive number"
// (and a prompt row's share of the int8 peak being at most 150%: MACs counted right cannot
// run much above the measured peak). Also checks the read probe itself: every ISA and thread count sums every word exactly once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_command.h"
#include "core/bandwidth_probe.h"
#include "core/compute_probe.h"
#include "kernels/cpu/kernels.h"

namespace {

using Json = nlohmann::json;
using pi::testing::run_command;

const std::string kBin = PI_BIN_DIR;

class BenchCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (std::filesystem::temp_directory_path() / ("pi_bench_" + std::to_string(::getpid())))
               .string();
    std::filesystem::create_directories(dir_);
    dense_ = dir_ + "/tiny.gguf";
    pwri_ = dir_ + "/tiny.pwri.gguf";
    for (const std::string& args : {"-o " + dense_, "--pwri -o " + pwri_}) {
      auto r = run_command(kBin + "/powerinfer synth --no-progress --preset tiny " + args);
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  struct Run {
    int exit_code = -1;
    std::string out;  // stdout: the report
    std::string log;  // stderr
  };

  // Runs `powerinfer bench ARGS` with a small probe (tiny models; timings are not checked).
  static Run bench(const std::string& args) {
    const std::string out = dir_ + "/out.txt";
    auto r = run_command("(" + kBin + "/powerinfer bench --probe-mib 8 --probe-passes 2 " + args +
                         " > " + out + ")");
    std::ifstream in(out);
    return {r.exit_code,
            {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()},
            r.output};
  }

  static std::string grid() {
    return "-m " + dense_ + "," + pwri_ + " --mode dense,sparse -p 8 -n 4 -t 1,2 -r 2";
  }

  // The rows the grid above must produce, in order: file, mode, threads, test.
  static std::vector<std::vector<std::string>> expected_rows() {
    std::vector<std::vector<std::string>> rows;
    for (const auto& [file, modes] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"tiny.gguf", {"dense"}}, {"tiny.pwri.gguf", {"dense", "sparse"}}})
      for (const std::string& mode : modes)
        for (const char* t : {"1", "2"})
          for (const char* test : {"pp8", "tg4"}) rows.push_back({file, mode, t, test});
    return rows;
  }

  static inline std::string dir_, dense_, pwri_;
};

// The compute paths this CPU runs, in report order, and the kernels' int8 path ("" for the
// scalar kernels), as the bench picks them (bench_runner.cpp).
std::vector<std::string> available_paths() {
  std::vector<std::string> out;
  for (pi::ComputePath p : pi::kComputePaths)
    if (pi::compute_path_available(p)) out.emplace_back(pi::compute_path_name(p));
  return out;
}

std::string int8_path() {
  const std::string isa = pi::cpu::isa_name(pi::cpu::default_isa()).data();
  if (isa == "avx512") return std::string(pi::compute_path_name(pi::ComputePath::Int8Vnni512));
  if (isa == "avx2") return std::string(pi::compute_path_name(pi::ComputePath::Int8Avx2));
  return "";
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Cells of a markdown table row "| a | b |" -> {"a", "b"}.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  size_t b = 1;
  while (b < line.size()) {
    const size_t e = line.find('|', b);
    if (e == std::string::npos) break;
    std::string c = line.substr(b, e - b);
    c.erase(0, c.find_first_not_of(' '));
    c.erase(c.find_last_not_of(' ') + 1);
    out.push_back(c);
    b = e + 1;
  }
  return out;
}

// The data rows of the markdown table whose header starts with `first_header`.
std::vector<std::vector<std::string>> table(const std::string& md,
                                            const std::string& first_header) {
  std::vector<std::vector<std::string>> rows;
  const std::vector<std::string> lines = lines_of(md);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("| " + first_header + " |", 0) != 0) continue;
    const size_t n = cells(lines[i]).size();
    EXPECT_LT(i + 1, lines.size());
    EXPECT_EQ(lines[i + 1].rfind("|---|", 0), 0u) << lines[i + 1];
    for (size_t k = i + 2; k < lines.size() && lines[k].rfind("|", 0) == 0; ++k) {
      rows.push_back(cells(lines[k]));
      EXPECT_EQ(rows.back().size(), n) << lines[k];
    }
    break;
  }
  return rows;
}

TEST_F(BenchCli, MarkdownHasHeaderAndOneRowPerGridPoint) {
  const Run r = bench(grid());
  ASSERT_EQ(r.exit_code, 0) << r.log;
  EXPECT_NE(r.out.find("## powerinfer bench"), std::string::npos);
  for (const char* key : {"- date: ", "- machine: ", "- kernels: ", "- load average", "- build: "})
    EXPECT_NE(r.out.find(key), std::string::npos) << key << "\n" << r.out;
  EXPECT_NE(r.out.find("commit "), std::string::npos);

  const auto models = table(r.out, "#");
  ASSERT_EQ(models.size(), 2u) << r.out;
  EXPECT_EQ(models[0][1], "tiny.gguf");
  EXPECT_EQ(models[0][4], "GGUF");
  EXPECT_EQ(models[1][1], "tiny.pwri.gguf");
  EXPECT_EQ(models[1][4], "PWRI");
  EXPECT_EQ(models[1][2], "llama");

  const auto probe = table(r.out, "threads");
  ASSERT_EQ(probe.size(), 2u) << r.out;
  EXPECT_EQ(probe[0][0], "1");
  EXPECT_EQ(probe[1][0], "2");
  // A model run measures the int8 path of the kernels alone, on each thread count.
  const bool int8 = int8_path() != "";
  const auto compute = table(r.out, "compute path");
  ASSERT_EQ(compute.size(), int8 ? 2u : 0u) << r.out;
  for (size_t i = 0; i < compute.size(); ++i) {
    EXPECT_EQ(compute[i][0], int8_path());
    EXPECT_EQ(compute[i][2], std::to_string(i + 1));
    EXPECT_GT(std::stod(compute[i][3]), 0.0);
  }

  const auto rows = table(r.out, "model");
  const auto want = expected_rows();
  ASSERT_EQ(rows.size(), want.size()) << r.out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    ASSERT_EQ(row.size(), 13u);
    EXPECT_EQ(std::vector<std::string>(row.begin(), row.begin() + 4), want[i]) << "row " << i;
    EXPECT_GT(std::stod(row[4]), 0.0) << "t/s, row " << i;
    const bool gen = row[3] == "tg4", sparse = row[1] == "sparse";
    EXPECT_EQ(row[6] == "all", !sparse) << row[6];
    if (sparse) {
      EXPECT_NE(row[6].find('%'), std::string::npos);
    }
    if (gen) {
      EXPECT_GT(std::stod(row[7]), 0.0) << "MiB/token";
      EXPECT_NE(row[10].find('%'), std::string::npos);
      EXPECT_NE(row[11].find('%'), std::string::npos);
      // Dense rows read nothing scattered: their roofline share is the probe share.
      if (!sparse) EXPECT_EQ(row[11], row[10]);
      EXPECT_EQ(row[12], "-");
    } else {
      EXPECT_EQ(row[7], "-");
      EXPECT_EQ(row[8], "-");
      EXPECT_EQ(row[10], "-");
      EXPECT_EQ(row[11], "-");
      if (sparse || !int8) {
        EXPECT_EQ(row[12], "-");
      } else {
        ASSERT_EQ(row[12].back(), '%') << row[12];
        EXPECT_GT(std::stod(row[12]), 0.0);
        EXPECT_LE(std::stod(row[12]), 150.0);
      }
    }
  }
}

TEST_F(BenchCli, JsonCarriesTheSameGridAndConsistentBytes) {
  const Run r = bench(grid() + " -o json");
  ASSERT_EQ(r.exit_code, 0) << r.log;
  Json j;
  ASSERT_NO_THROW(j = Json::parse(r.out)) << r.out;
  EXPECT_EQ(j["powerinfer_bench_version"], 1);
  for (const char* k : {"cpu_model", "logical_cpus", "kernel_isa", "mem_gib"})
    EXPECT_TRUE(j["machine"].contains(k)) << k;
  for (const char* k : {"version", "commit", "compiler", "build_type", "flags"}) {
    ASSERT_TRUE(j["build"].contains(k)) << k;
    EXPECT_FALSE(j["build"][k].get<std::string>().empty()) << k;
  }
  EXPECT_EQ(j["options"]["reps"], 2);
  EXPECT_EQ(j["probe"]["table"].size(), 2u);
  EXPECT_GE(j["probe"]["bytes"].get<uint64_t>(), uint64_t{8} << 20);
  const Json& compute = j["probe"]["compute"];
  const bool int8 = int8_path() != "";
  EXPECT_EQ(compute["int8_path"].is_null(), !int8);
  ASSERT_EQ(compute["table"].size(), int8 ? 2u : 0u);
  for (const Json& c : compute["table"]) {
    EXPECT_EQ(c["path"], int8_path());
    EXPECT_EQ(c["passes_gmacs"].size(), 2u);
    EXPECT_GT(c["gmacs_median"].get<double>(), 0.0);
  }

  const Json& models = j["models"];
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(models[0]["format"], "GGUF");
  EXPECT_EQ(models[1]["format"], "PWRI");
  EXPECT_TRUE(models[1]["has_predictors"].get<bool>());
  EXPECT_GT(models[1]["predictor_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(models[0]["predictor_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(models[0]["n_layer"], 2);
  EXPECT_LT(models[0]["ffn_bytes"].get<uint64_t>(),
            models[0]["weight_bytes_per_token"].get<uint64_t>());
  // The matrices a token multiplies, by shape (the PWRI file's down_t counts as down, its
  // predictors not at all); the head is the [n_vocab, n_embd] output matrix.
  for (const Json& m : models) {
    const int64_t e = m["n_embd"], ff = m["n_ff"], kv = e / m["n_head"].get<int64_t>() * m["n_head_kv"].get<int64_t>();
    EXPECT_EQ(m["layer_matrix_params"].get<int64_t>(), m["n_layer"].get<int64_t>() * (2 * e * e + 2 * e * kv + 3 * e * ff));
    EXPECT_EQ(m["head_params"].get<int64_t>(), m["n_vocab"].get<int64_t>() * e);
  }

  const Json& res = j["results"];
  const auto want = expected_rows();
  ASSERT_EQ(res.size(), want.size());
  double dense_pwri_bytes = 0, sparse_pwri_bytes = 0;
  for (size_t i = 0; i < res.size(); ++i) {
    const Json& row = res[i];
    EXPECT_EQ(row["file"], want[i][0]);
    EXPECT_EQ(row["mode"], want[i][1]);
    EXPECT_EQ(std::to_string(row["threads"].get<int>()), want[i][2]);
    EXPECT_EQ(row["test"], want[i][3]);
    ASSERT_EQ(row["samples_ts"].size(), 2u);
    EXPECT_EQ(row["reps"], 2);
    const double med = row["ts_median"], lo = row["ts_min"], hi = row["ts_max"];
    EXPECT_GT(lo, 0.0);
    EXPECT_LE(lo, med);
    EXPECT_LE(med, hi);
    EXPECT_EQ(row["probe"]["passes_gbps"].size(), 2u + 2u);  // passes before + one per rep
    const bool sparse = row["mode"] == "sparse";
    EXPECT_EQ(row["active_fraction"].is_null(), !sparse);
    if (sparse) {
      const double a = row["active_fraction"];
      EXPECT_GT(a, 0.0);
      EXPECT_LT(a, 0.5);  // the file is built for 10% activity
    }
    if (row["test"] == "pp8") {
      EXPECT_EQ(row["n_prompt"], 8);
      EXPECT_TRUE(row["bytes_per_token"].is_null());
      EXPECT_TRUE(row["gbps"].is_null());
      // Dense prompt rows: one batch of 8 tokens, every layer matrix per token, the head once;
      // the share is MACs x t/s over the int8 peak on the row's thread count.
      EXPECT_EQ(row["int8_ratio"].is_null(), sparse || !int8);
      if (row["int8_ratio"].is_null()) continue;
      const Json& m = models[row["model"].get<size_t>()];
      const double macs = (8.0 * m["layer_matrix_params"].get<double>() + m["head_params"].get<double>()) / 8;
      EXPECT_DOUBLE_EQ(row["macs_per_token"].get<double>(), macs);
      double peak = 0;
      for (const Json& c : compute["table"])
        if (c["threads"] == row["threads"]) peak = c["gmacs_median"];
      EXPECT_DOUBLE_EQ(row["int8_peak_gmacs"].get<double>(), peak);
      const double share = row["int8_ratio"];
      EXPECT_NEAR(share, macs * med / (peak * 1e9), 1e-9 * share);
      EXPECT_GT(share, 0.0);
      EXPECT_LE(share, 1.5);
      continue;
    }
    EXPECT_EQ(row["n_gen"], 4);
    const Json& b = row["bytes_per_token"];
    ASSERT_TRUE(b.is_object());
    const double sum = b["other_weights"].get<double>() + b["ffn"].get<double>() +
                       b["predictors"].get<double>() + b["kv"].get<double>();
    EXPECT_NEAR(b["total"].get<double>(), sum, 1e-6 * sum);
    EXPECT_GT(b["kv"].get<double>(), 0.0);
    EXPECT_GT(row["gbps"].get<double>(), 0.0);
    EXPECT_GT(row["roofline_ratio"].get<double>(), 0.0);
    if (!sparse) EXPECT_NEAR(row["roofline_ratio"].get<double>(), row["probe_ratio"].get<double>(), 1e-9);
    // Sparse rows: the scattered passes ran around the repetitions too (before + one per rep),
    // and the roofline counts the FFN rows at their share of the row's sequential rate.
    EXPECT_EQ(row["probe"].contains("scattered_passes_gbps"), sparse);
    if (sparse) {
      EXPECT_EQ(row["probe"]["scattered_passes_gbps"].size(), 2u + 2u);
      const double seq = row["probe"]["gbps_median"], sc = row["probe"]["scattered_gbps_median"];
      ASSERT_GT(sc, 0.0);
      const double ffn = b["ffn"].get<double>(), total = b["total"].get<double>();
      const double seconds = ((total - ffn) + ffn * seq / sc) / (seq * 1e9);
      EXPECT_NEAR(row["roofline_ratio"].get<double>(), seconds * med, 1e-9 * seconds * med);
    }
    const Json& m = models[row["model"].get<size_t>()];
    if (!sparse) {
      EXPECT_DOUBLE_EQ(b["ffn"].get<double>(), m["ffn_bytes"].get<double>());
      EXPECT_DOUBLE_EQ(b["predictors"].get<double>(), 0.0);
    } else {
      EXPECT_DOUBLE_EQ(b["predictors"].get<double>(), m["predictor_bytes"].get<double>());
      EXPECT_GT(b["ffn"].get<double>(), 0.0);
      EXPECT_LT(b["ffn"].get<double>(), m["ffn_bytes"].get<double>());
    }
    if (row["file"] == "tiny.pwri.gguf" && row["threads"] == 1)
      (sparse ? sparse_pwri_bytes : dense_pwri_bytes) = b["total"].get<double>();
  }
  EXPECT_GT(dense_pwri_bytes, 0.0);
  EXPECT_LT(sparse_pwri_bytes, dense_pwri_bytes);
}

TEST_F(BenchCli, CsvHasAHeaderAndOneLinePerRow) {
  const Run r = bench(grid() + " -o csv");
  ASSERT_EQ(r.exit_code, 0) << r.log;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 1 + expected_rows().size()) << r.out;
  const auto fields = [](const std::string& l) { return std::count(l.begin(), l.end(), ',') + 1; };
  EXPECT_EQ(lines[0].rfind("file,arch,type,format,mode,threads,", 0), 0u);
  for (const std::string& l : lines) EXPECT_EQ(fields(l), fields(lines[0])) << l;
  EXPECT_EQ(lines[1].rfind("tiny.gguf,llama,", 0), 0u) << lines[1];
}

TEST_F(BenchCli, NaturalModeAndDefaultsPerFile) {
  // Without a mode, PWRI files run sparse and GGUF files dense; -p 0 skips the prompt test.
  const Run r = bench("-m " + dense_ + " -m " + pwri_ + " -p 0 -n 3 -t 1 -r 1 -o json");
  ASSERT_EQ(r.exit_code, 0) << r.log;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][0]["mode"], "dense");
  EXPECT_EQ(j["results"][0]["test"], "tg3");
  EXPECT_EQ(j["results"][1]["mode"], "sparse");
}

TEST_F(BenchCli, ReGluExpertsRunSparseAndCountTheRowsTheyRead) {
  // smallthinker: the natural mode is sparse (only the positive gates' rows of up and down_t),
  // dense computes every row; the sparse row's FFN bytes are the routers, the chosen experts'
  // gates whole, and the active share of their up and down_t rows.
  const std::string st = dir_ + "/st.gguf";
  const auto made = run_command(kBin + "/powerinfer synth --no-progress --preset smallthinker-4b-a0.6b --layers 2 "
                                       "--embd 128 --heads 4 --kv-heads 2 --head-dim 32 --vocab 512 --experts 8 "
                                       "--experts-used 2 --expert-ff 64 --transpose-down --type q8_0 -o " + st);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  Run r = bench("-m " + st + " -p 0 -n 4 -t 1 -r 1 -o json");
  ASSERT_EQ(r.exit_code, 0) << r.log;
  EXPECT_EQ(Json::parse(r.out)["results"][0]["mode"], "sparse");
  r = bench("-m " + st + " --mode dense,sparse -p 0 -n 4 -t 1 -r 1 -o json");
  ASSERT_EQ(r.exit_code, 0) << r.log;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 2u);
  const Json& dense = j["results"][0];
  const Json& sparse = j["results"][1];
  EXPECT_EQ(dense["mode"], "dense");
  EXPECT_EQ(sparse["mode"], "sparse");
  const double a = sparse["active_fraction"];
  EXPECT_GT(a, 0.02);
  EXPECT_LT(a, 0.3);  // built for 10% activity
  const double all = j["models"][0]["ffn_bytes"].get<double>();
  EXPECT_DOUBLE_EQ(dense["bytes_per_token"]["ffn"].get<double>(), all);
  const double router = 2.0 * 8 * 128 * 4;  // f32 [8, 128] per layer
  const double experts = all - router;      // per token: 2 experts' gate, up and down_t, equal sizes
  EXPECT_NEAR(sparse["bytes_per_token"]["ffn"].get<double>(), router + experts * (1 + 2 * a) / 3, 1e-6 * all);
}

// The report says how much of a model the CPU repacked at load (transposed Q4_0 matrices,
// for the AVX-512 axpy: cpu::axpy_layout), and --no-repack makes no copy at all, not even in
// the throwaway session that maps the weights before the sparse rows.
TEST_F(BenchCli, ReportsTheRepackedBytesAndNoRepackMakesNone) {
  const std::string q4 = dir_ + "/tiny.q4_0.pwri.gguf";
  const auto made = run_command(kBin + "/powerinfer synth --no-progress --preset tiny --pwri --type q4_0 -o " + q4);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  Run r = bench("-m " + q4 + " -p 0 -n 2 -t 1 -r 1 -o json");
  ASSERT_EQ(r.exit_code, 0) << r.log;
  Json j = Json::parse(r.out);
  const uint64_t repacked = j["models"][0]["repacked_bytes"].get<uint64_t>();
  if (j["machine"]["kernel_isa"] == "avx512") {
    // ffn_down_t of every layer, [n_ff, n_embd] Q4_0, and the attention projections (dense
    // products beside the sparse FFN) as Q4_0_R16; the head is the token embedding here.
    const Json& m = j["models"][0];
    const uint64_t n_layer = m["n_layer"], n_ff = m["n_ff"], n_embd = m["n_embd"];
    const uint64_t n_kv = n_embd / m["n_head"].get<uint64_t>() * m["n_head_kv"].get<uint64_t>();
    const uint64_t attention = n_layer * (2 * n_embd * n_embd + 2 * n_kv * n_embd) / 32 * 18;
    // At least those (bench's throwaway dense session that maps every page also copies the
    // FFN and the head into Q4_0_R16, which the sparse rows do not read).
    EXPECT_GE(repacked, n_layer * n_ff * n_embd / 32 * 18 + attention);
  } else {
    EXPECT_EQ(repacked, 0u);  // the AVX2 and scalar kernels read the file's layout
  }
  r = bench("-m " + q4 + " -p 0 -n 2 -t 1 -r 1");
  ASSERT_EQ(r.exit_code, 0) << r.log;
  EXPECT_EQ(r.out.find("repacked at load") != std::string::npos, repacked > 0) << r.out;
  r = bench("-m " + q4 + " -p 0 -n 2 -t 1 -r 1 --no-repack -o json");
  ASSERT_EQ(r.exit_code, 0) << r.log;
  j = Json::parse(r.out);
  EXPECT_EQ(j["models"][0]["repacked_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["results"][0]["mode"], "sparse");
}

TEST_F(BenchCli, ProbeOnlyReportsEveryThreadCount) {
  Run r = bench("--probe -t 3");
  ASSERT_EQ(r.exit_code, 0) << r.log;
  const auto probe = table(r.out, "threads");
  ASSERT_EQ(probe.size(), 3u) << r.out;
  for (size_t i = 0; i < probe.size(); ++i) {
    EXPECT_EQ(probe[i][0], std::to_string(i + 1));
    EXPECT_GT(std::stod(probe[i][1]), 0.0);
  }
  EXPECT_EQ(r.out.find("| model |"), std::string::npos);
  // Every available compute path on each thread count, in path order within a count.
  const std::vector<std::string> paths = available_paths();
  const auto compute = table(r.out, "compute path");
  ASSERT_EQ(compute.size(), 3 * paths.size()) << r.out;
  for (size_t i = 0; i < compute.size(); ++i) {
    EXPECT_EQ(compute[i][0], paths[i % paths.size()]);
    EXPECT_EQ(compute[i][2], std::to_string(i / paths.size() + 1));
    EXPECT_GT(std::stod(compute[i][3]), 0.0);
  }

  r = bench("--probe -t 2 -o json");
  ASSERT_EQ(r.exit_code, 0) << r.log;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j["probe"]["table"].size(), 2u);
  EXPECT_EQ(j["probe"]["table"][1]["threads"], 2);
  EXPECT_EQ(j["probe"]["table"][1]["passes_gbps"].size(), 2u);
  EXPECT_GT(j["probe"]["table"][0]["gbps_median"].get<double>(), 0.0);
  EXPECT_EQ(j["probe"]["table"][1]["scattered_passes_gbps"].size(), 2u);
  EXPECT_GT(j["probe"]["table"][0]["scattered_gbps_median"].get<double>(), 0.0);
  EXPECT_TRUE(j["results"].empty());
  const Json& c = j["probe"]["compute"];
  ASSERT_EQ(c["table"].size(), 2 * paths.size());
  EXPECT_EQ(c["skipped"].size() + paths.size(), pi::kComputePaths.size());
  for (const Json& s : c["skipped"])
    EXPECT_EQ(std::count(paths.begin(), paths.end(), s.get<std::string>()), 0);
  for (const Json& row : c["table"]) {
    EXPECT_EQ(row["passes_gmacs"].size(), 2u);
    EXPECT_GT(row["gmacs_min"].get<double>(), 0.0);
    EXPECT_LE(row["gmacs_min"].get<double>(), row["gmacs_median"].get<double>());
    EXPECT_LE(row["gmacs_median"].get<double>(), row["gmacs_max"].get<double>());
  }

  r = bench("--probe -t 1 -o csv");
  ASSERT_EQ(r.exit_code, 0) << r.log;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  // One column per compute path: a rate where it is available, empty where not.
  for (pi::ComputePath path : pi::kComputePaths) {
    const std::string name(pi::compute_path_name(path));
    EXPECT_NE(lines[0].find("," + name + "_gmacs"), std::string::npos) << name;
  }
  EXPECT_EQ(std::count(lines[1].begin(), lines[1].end(), ','), std::count(lines[0].begin(), lines[0].end(), ','));
}

TEST_F(BenchCli, ErrorsAreClearAndNonZero) {
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"-m " + dir_ + "/missing.gguf -n 2", "missing.gguf: no such model file"},
      {"-m " + dense_ + " --sparse -n 2", "is a dense GGUF file"},
      {"-m " + dense_ + " --mode sparse -n 2", "is a dense GGUF file"},
      {"-m " + dense_ + " -t 1,,2", "-t: empty item"},
      {"-m " + dense_ + " -t two", "-t: 'two' is not an integer"},
      {"-m " + dense_ + " -t 0", "-t: 0 is out of range"},
      {"-m " + dense_ + " -p -3", "-p: -3 is out of range"},
      {"-m " + dense_ + " -n 4x", "-n: '4x' is not an integer"},
      {"-m " + dense_ + " -p 0 -n 0", "nothing to run"},
      {"-m " + dense_ + " --mode fast", "--mode: unknown mode 'fast'"},
      {"-m " + dense_ + " -o xml", "-o: unknown format 'xml'"},
      {"-m " + dense_ + " -r 0", "-r: 0 is out of range"},
      {"-n 2", "no model given"},
      {"--probe -n 2", "--probe runs only the probes"},
  };
  for (const Case& c : cases) {
    const Run r = bench(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.log.find(c.message), std::string::npos) << c.args << "\n" << r.log;
    EXPECT_TRUE(r.out.empty()) << c.args << "\n" << r.out;
  }
}

// The probe reads every word exactly once for each ISA and thread count (sizes that do not
// split evenly over threads or vector widths included).
TEST(BandwidthProbe, SumsEveryWordOnceForEveryIsaAndThreadCount) {
  for (pi::ProbeIsa isa : {pi::ProbeIsa::Scalar, pi::ProbeIsa::Avx2, pi::ProbeIsa::Avx512}) {
    if (!pi::probe_isa_available(isa)) continue;
    for (size_t bytes : {size_t{4096}, size_t{3} << 20, (size_t{5} << 20) + 4096}) {
      auto probe = pi::BandwidthProbe::create(bytes, isa);
      ASSERT_TRUE(probe.ok()) << probe.error().message;
      EXPECT_EQ((*probe)->isa(), isa);
      uint64_t want = 0;
      for (size_t i = 0; i < (*probe)->bytes() / 8; ++i) want += pi::probe_word(i);
      for (int threads : {1, 2, 3, 7}) {
        pi::ThreadPool pool(threads);
        const pi::ProbePass p = (*probe)->pass(pool);
        EXPECT_EQ(p.sum, want) << pi::probe_isa_name(isa) << " " << bytes << " " << threads;
        EXPECT_GT(p.gbps, 0.0);
      }
    }
  }
  // Scattered passes read exactly the listed chunks, each once, for every ISA and thread
  // count (slices of whole groups of eight and a few chunks past the last); the list is
  // ascending, reproducible, about the asked fraction, and empty for fraction 0.
  auto probe = pi::BandwidthProbe::create((size_t{3} << 20) + 4096);
  ASSERT_TRUE(probe.ok());
  const size_t chunk = 2304, n_chunks = (*probe)->bytes() / chunk;
  for (double fraction : {0.1, 0.5, 1.0}) {
    const std::vector<uint32_t> list = pi::probe_chunks(n_chunks, fraction, 7);
    EXPECT_EQ(list, pi::probe_chunks(n_chunks, fraction, 7));
    EXPECT_TRUE(std::is_sorted(list.begin(), list.end()));
    EXPECT_NEAR(static_cast<double>(list.size()), fraction * static_cast<double>(n_chunks),
                5 * std::sqrt(static_cast<double>(n_chunks)) + 1);
  }
  for (pi::ProbeIsa isa : {pi::ProbeIsa::Scalar, pi::ProbeIsa::Avx2, pi::ProbeIsa::Avx512}) {
    if (!pi::probe_isa_available(isa)) continue;
    auto each = pi::BandwidthProbe::create((*probe)->bytes(), isa);
    ASSERT_TRUE(each.ok());
    for (double fraction : {0.1, 0.5, 1.0}) {
      uint64_t want = 0;
      for (uint32_t c : pi::probe_chunks(n_chunks, fraction, 7))
        for (size_t w = 0; w < chunk / 8; ++w) want += pi::probe_word(c * (chunk / 8) + w);
      for (int threads : {1, 2, 3}) {
        pi::ThreadPool pool(threads);
        const pi::ProbePass p = (*each)->scattered_pass(pool, chunk, fraction, 7);
        EXPECT_EQ(p.sum, want) << pi::probe_isa_name(isa) << " " << fraction << " " << threads;
        EXPECT_GT(p.gbps, 0.0);
      }
    }
  }
  EXPECT_NE(pi::probe_chunks(n_chunks, 0.1, 7), pi::probe_chunks(n_chunks, 0.1, 8));
  EXPECT_TRUE(pi::probe_chunks(n_chunks, 0.0, 7).empty());
  {
    pi::ThreadPool pool(2);
    EXPECT_EQ((*probe)->scattered_pass(pool, chunk, 0.0, 1).gbps, 0.0);
    EXPECT_EQ((*probe)->scattered_pass(pool, 100, 0.5, 1).gbps, 0.0);  // not whole lines
  }

  auto automatic = pi::BandwidthProbe::create(4096);
  ASSERT_TRUE(automatic.ok());
  EXPECT_NE((*automatic)->isa(), pi::ProbeIsa::Auto);
  EXPECT_EQ(pi::median_of({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(pi::median_of({4.0, 1.0, 2.0, 3.0}), 2.5);
}

}  // namespace
