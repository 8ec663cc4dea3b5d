// The config schema: the seed config resolves to the documented values, and
// every kind of bad input is a one-line ConfigError naming file:line and key.
#include <fno_train/config.h>
#include <fno_train/train_step.h>

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>
#include <vector>

#include "golden.h"

namespace {

const std::string kValid = R"(model:
  n_modes: [16, 16]
  hidden_channels: 32
data:
  train_file: train.pt
  test:
    - {file: test16.pt}
training:
  epochs: 3
)";

void check_error(const std::string& yaml, const std::string& expected,
                 const std::vector<std::string>& overrides = {}) {
  INFO("yaml:\n", yaml);
  try {
    fno::parse_config(yaml, "cfg.yaml", overrides);
    FAIL("no error; expected: ", expected);
  } catch (const fno::ConfigError& e) {
    const std::string msg = e.what();
    INFO("message: ", msg);
    CHECK(msg.find('\n') == std::string::npos);
    CHECK(msg.find(expected) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("the seed config resolves to the Darcy example's settings") {
  const auto cfg = fno::load_config(std::string(FNO_SOURCE_DIR) + "/configs/darcy.yaml");
  CHECK(cfg.model.n_modes() == std::vector<int64_t>{16, 16});
  CHECK(cfg.model.hidden_channels() == 32);
  CHECK(cfg.model.projection_channel_ratio() == 2.0);
  CHECK(cfg.data.n_train == 1000);
  CHECK(cfg.data.batch_size == 32);
  REQUIRE(cfg.data.tests.size() == 2);
  CHECK(cfg.data.tests[0].n_samples == 50);  // what darcy_test_16.pt holds
  CHECK(cfg.data.tests[1].n_samples == 50);
  CHECK(cfg.optimizer.lr == doctest::Approx(8e-3));
  CHECK(cfg.optimizer.weight_decay == doctest::Approx(1e-4));
  CHECK(cfg.scheduler.name == fno::SchedulerName::kCosine);
  CHECK(cfg.scheduler.t_max == 30);
  CHECK(cfg.training.epochs == 20);
  CHECK(cfg.training.loss == fno::LossName::kH1);
  CHECK((cfg.training.eval_losses ==
         std::vector<fno::LossName>{fno::LossName::kH1, fno::LossName::kL2}));
  // Data paths resolve against the config file's directory.
  CHECK(cfg.data.train_file.find("configs/../data/darcy/darcy_train_16.pt") != std::string::npos);
  CHECK(cfg.resolved_yaml.find("epochs: 20") != std::string::npos);
}

TEST_CASE("--set overrides any value by its dotted path") {
  const auto cfg = fno::parse_config(
      kValid, "cfg.yaml", {"training.epochs=7", "optimizer.lr=0.5", "model.n_modes=[8]"});
  CHECK(cfg.training.epochs == 7);
  CHECK(cfg.optimizer.lr == 0.5);
  CHECK(cfg.model.n_modes() == std::vector<int64_t>{8});
  CHECK(cfg.resolved_yaml.find("epochs: 7") != std::string::npos);
}

TEST_CASE("bad configs name the file, the line and the key") {
  check_error("", "cfg.yaml: empty config");
  check_error("model: [1, 2\n", "cfg.yaml:");  // malformed YAML
  check_error("- a\n- b\n", "expected a mapping of sections");
  check_error(kValid + "bogus:\n  x: 1\n", "cfg.yaml:10: bogus: unknown section");
  check_error("model:\n  hidden_channel: 32\ndata:\n  train_file: t.pt\n",
              "cfg.yaml:2: model.hidden_channel: unknown key");
  check_error("model:\n  hidden_channels: abc\ndata:\n  train_file: t.pt\n",
              "cfg.yaml:2: model.hidden_channels: expected an integer >= 1, got 'abc'");
  check_error("model:\n  hidden_channels: 0\ndata:\n  train_file: t.pt\n",
              "cfg.yaml:2: model.hidden_channels: expected an integer >= 1, got 0");
  check_error("model:\n  n_modes: [16, -4]\ndata:\n  train_file: t.pt\n",
              "cfg.yaml:2: model.n_modes: expected an integer >= 1, got -4");
  check_error("model:\n  n_modes: [1, 2, 3, 4]\ndata:\n  train_file: t.pt\n",
              "model.n_modes: expected a list of 1 to 3 entries, got 4");
  check_error("data:\n  train_file: t.pt\n  batch_size: -3\n",
              "cfg.yaml:3: data.batch_size: expected an integer in [1, 1000000000], got -3");
  check_error("data:\n  train_file: t.pt\noptimizer:\n  lr: fast\n",
              "cfg.yaml:4: optimizer.lr: expected a number > 0, got 'fast'");
  check_error(
      "data:\n  train_file: t.pt\nscheduler:\n  name: warmup\n",
      "scheduler.name: unknown value 'warmup' (expected one of: cosine, step, plateau, none)");
  check_error("data:\n  train_file: t.pt\ntraining:\n  loss: mse\n",
              "training.loss: unknown value 'mse'");
  check_error("data:\n  train_file: t.pt\ndata2: 3\n", "data2: unknown section");
  check_error("data:\n  train_file: t.pt\n  shuffle: maybe\n",
              "cfg.yaml:3: data.shuffle: expected true or false, got 'maybe'");
  check_error("data:\n  train_file: t.pt\n  test:\n    - {path: x.pt}\n",
              "data.test[0].path: unknown key");
  check_error("data:\n  train_file: t.pt\n  test:\n    - {n_samples: 3}\n",
              "data.test[0].file: missing");
  check_error("model:\n  hidden_channels: 8\n", "data.train_file: missing");
  check_error("data:\n  train_file: t.pt\ndevice:\n  name: tpu\n",
              "device.name: unknown value 'tpu'");
  check_error("data: 5\n", "data: expected a mapping of keys");
  check_error("data:\n  train_file: t.pt\noffload:\n  max_inflight_mib: lots\n",
              "cfg.yaml:4: offload.max_inflight_mib: expected auto or a whole number of MiB in [1, "
              "2^30], got 'lots'");
  check_error(
      "data:\n  train_file: t.pt\noffload:\n  max_inflight_mib: 0\n",
      "offload.max_inflight_mib: expected auto or a whole number of MiB in [1, 2^30], got '0'");
  check_error("model:\n  single_gelu: true\ndata:\n  train_file: t.pt\n",
              "cfg.yaml:2: model.single_gelu: needs model.use_channel_mlp: false");
}

TEST_CASE("offload.max_inflight_mib is auto (0) by default, or a number of MiB") {
  CHECK(fno::parse_config(kValid, "cfg.yaml").offload.max_inflight_mib == 0);
  CHECK(fno::parse_config(kValid, "cfg.yaml", {"offload.max_inflight_mib=2048"})
            .offload.max_inflight_mib == 2048);
  CHECK(fno::parse_config(kValid, "cfg.yaml", {"offload.max_inflight_mib=auto"})
            .offload.max_inflight_mib == 0);
  CHECK(fno::parse_inflight_mib("16384") == 16384);
  for (const std::string bad : {"", "1.5", "-3", "12MiB", "2000000000"}) {
    INFO("text '", bad, "'");
    CHECK_THROWS_AS(fno::parse_inflight_mib(bad), std::invalid_argument);
  }
}

TEST_CASE("errors quoting user input stay on one line") {
  // Found by fuzz_config: yaml-cpp quotes the offending character, a line break included.
  const std::string seed =
      std::string(FNO_SOURCE_DIR) + "/tests/fuzz/seeds/config/regression-yaml-escape.yaml";
  try {
    fno::load_config(seed);
    FAIL("no error for ", seed);
  } catch (const fno::ConfigError& e) {
    const std::string msg = e.what();
    INFO("message: ", msg);
    CHECK(msg.find("malformed YAML: unknown escape character") != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
  check_error("? [a, b]\n: 3\n", "keys must be plain names");
  check_error("data:\n  train_file: t.pt\n  shuffle: \"yes\\nno\"\n",
              "data.shuffle: expected true or false");
  CHECK(fno::one_line("a\nb\tc\x01") == "a\\nb\\tc\\x01");
}

TEST_CASE("bad --set overrides are named as such") {
  check_error(kValid, "--set training.epochs: expected section.key=value", {"training.epochs"});
  check_error(kValid, "--set training.epoch=3: training.epoch: unknown key", {"training.epoch=3"});
  check_error(
      kValid,
      "--set training.epochs=-1: training.epochs: expected an integer in [1, 1000000000], got -1",
      {"training.epochs=-1"});
  check_error(kValid, "--set model.n_modes=[8, x]: model.n_modes: expected an integer",
              {"model.n_modes=[8, x]"});
}

TEST_CASE("an unknown key suggests the nearest known one") {
  check_error(kValid,
              "--set training.epoch=3: training.epoch: unknown key (did you mean training.epochs?)",
              {"training.epoch=3"});
  check_error("training:\n  epoch: 3\ndata:\n  train_file: t.pt\n",
              "cfg.yaml:2: training.epoch: unknown key (did you mean training.epochs?)");
  check_error("model:\n  hidden_channel: 32\ndata:\n  train_file: t.pt\n",
              "model.hidden_channel: unknown key (did you mean model.hidden_channels?)");
  // A key of another section.
  check_error(kValid, "training.batch_size: unknown key (did you mean data.batch_size?)",
              {"training.batch_size=4"});
  check_error("trainig:\n  epochs: 3\n", "trainig: unknown section (did you mean training?");
  check_error("data:\n  train_file: t.pt\n  test:\n    - {file: a.pt, n_sample: 3}\n",
              "data.test[0].n_sample: unknown key (did you mean n_samples?");
  // Nothing near: no suggestion.
  try {
    fno::parse_config(kValid, "cfg.yaml", {"model.colour=red"});
    FAIL("no error");
  } catch (const fno::ConfigError& e) {
    CHECK(std::string(e.what()) == "--set model.colour=red: model.colour: unknown key");
  }
}

TEST_CASE(
    "relative paths: the config's against its folder, --set's against the current directory") {
  const std::string dir = std::string(FNO_TEST_OUT_DIR) + "/config_paths";
  std::system(("mkdir -p '" + dir + "'").c_str());
  const std::string file = dir + "/cfg.yaml";
  std::ofstream(file) << kValid;
  char cwd[4096];
  REQUIRE(::getcwd(cwd, sizeof(cwd)) != nullptr);
  const auto from_file = fno::load_config(file);
  CHECK(from_file.data.train_file == dir + "/train.pt");
  REQUIRE(from_file.data.tests.size() == 1);
  CHECK(from_file.data.tests[0].file == dir + "/test16.pt");
  const auto from_set = fno::load_config(
      file,
      {"data.train_file=mine/train.h5", "data.test=[{file: mine/test.h5}, {file: /abs/t.h5}]"});
  CHECK(from_set.data.train_file == std::string(cwd) + "/mine/train.h5");
  REQUIRE(from_set.data.tests.size() == 2);
  CHECK(from_set.data.tests[0].file == std::string(cwd) + "/mine/test.h5");
  CHECK(from_set.data.tests[1].file == "/abs/t.h5");
  CHECK(from_set.resolved_yaml.find(std::string(cwd) + "/mine/train.h5") != std::string::npos);
}

namespace {

bool has_note(const fno::RunConfig& c, const std::string& text) {
  for (const auto& n : c.notes) {
    if (n.find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("notes: a training file set on the command line beside the file's test sets") {
  const auto own = fno::parse_config(kValid, "cfg.yaml", {"data.train_file=mine.h5"});
  REQUIRE(own.notes.size() == 1);
  CHECK(own.notes[0] ==
        "data.train_file is set on the command line, but the test sets are still cfg.yaml's "
        "(test16.pt); set data.test too, e.g. --set 'data.test=[{file: test.h5}]', or --set "
        "data.test=[] for none");
  CHECK(fno::parse_config(kValid, "cfg.yaml").notes.empty());
  CHECK(fno::parse_config(kValid, "cfg.yaml", {"data.train_file=mine.h5", "data.test=[]"})
            .notes.empty());
  CHECK(fno::parse_config(kValid, "cfg.yaml", {"data.train_file=a.h5", "data.test=[{file: b.h5}]"})
            .notes.empty());
}

TEST_CASE("options the offload policy ignores, and byte sizes, are each said in one line") {
  const auto none = fno::parse_config(
      kValid, "cfg.yaml",
      {"offload.gpu_memory_limit=4GB", "offload.compress=bf16", "offload.chunks=2"});
  CHECK(
      has_note(none, "offload.compress: ignored by offload.policy none (it moves no activations"));
  CHECK(has_note(none, "offload.gpu_memory_limit: offload.policy none plans nothing against it"));
  CHECK(has_note(none,
                 "offload.gpu_memory_limit: '4GB' is 4000000000 bytes = 3.73 GiB (GB = 10^9 bytes, "
                 "GiB = 2^30)"));
  CHECK(none.notes.size() == 3);
  for (const auto& n : none.notes) CHECK(n.find('\n') == std::string::npos);
  const auto gib = fno::parse_config(kValid, "cfg.yaml",
                                     {"offload.policy=auto", "offload.gpu_memory_limit=4GiB"});
  REQUIRE(gib.notes.size() == 1);
  CHECK(
      gib.notes[0] ==
      "offload.gpu_memory_limit: '4GiB' is 4294967296 bytes = 4 GiB (GB = 10^9 bytes, GiB = 2^30)");
  CHECK(gib.offload.gpu_memory_limit == (int64_t{4} << 30));
  const auto auto_chunks =
      fno::parse_config(kValid, "cfg.yaml", {"offload.policy=auto", "offload.chunks=4"});
  CHECK(has_note(auto_chunks, "offload.chunks: ignored by offload.policy auto (it picks its own)"));
  // The search's cap bounds auto alone, and reaches the engine's settings.
  const auto capped =
      fno::parse_config(kValid, "cfg.yaml", {"offload.policy=all", "offload.search_seconds=5"});
  CHECK(
      has_note(capped, "offload.search_seconds: ignored by offload.policy all (only auto plans)"));
  CHECK(fno::parse_config(kValid, "cfg.yaml", {"offload.policy=auto", "offload.search_seconds=0"})
            .notes.empty());
  CHECK(fno::OffloadConfig().search_seconds == 60);
  fno::OffloadConfig unbounded;
  unbounded.search_seconds = 0.5;
  CHECK(fno::offload_settings(unbounded, fno::PlanCacheText::kConfigKey).search_seconds == 0.5);
  check_error(kValid, "offload.search_seconds", {"offload.search_seconds=-1"});
  CHECK(fno::parse_config(kValid, "cfg.yaml", {"offload.search_seconds=1e9"})
            .offload.search_seconds == 1e9);
  // Defaults, and what the policy uses, say nothing.
  CHECK(fno::parse_config(kValid, "cfg.yaml", {"offload.policy=all", "offload.compress=bf16"})
            .notes.empty());
}

TEST_CASE("a stage index past the model's stages is an error") {
  // 4 blocks (the default) + lifting + projection: 6 stages.
  CHECK(fno::parse_config(kValid, "cfg.yaml", {"offload.policy=blocks:6"}).offload.policy.blocks ==
        6);
  check_error(kValid,
              "offload.policy: 'blocks:9' names 9 stages, but the model has 6 (the lifting, "
              "model.n_layers 4 blocks, the projection); use K <= 6",
              {"offload.policy=blocks:9"});
  check_error(kValid, "'blocks:5' names 5 stages, but the model has 4",
              {"offload.policy=blocks:5", "model.n_layers=2"});
}

TEST_CASE("record_setting changes one key of the resolved YAML") {
  auto cfg = fno::parse_config(kValid, "cfg.yaml", {"offload.policy=all"});
  const auto before = cfg.resolved_yaml;
  CHECK(before.find("\n  policy: all\n") != std::string::npos);
  fno::record_setting(cfg, "offload.policy", "none");
  CHECK(cfg.resolved_yaml.find("\n  policy: all\n") == std::string::npos);
  CHECK(cfg.resolved_yaml.find("\n  policy: none\n") != std::string::npos);
  CHECK(cfg.resolved_yaml.size() == before.size() + 1);
  // The result parses to the same config with the new value.
  const auto again = fno::parse_config(cfg.resolved_yaml, "config.yaml");
  CHECK(again.offload.policy.text == "none");
  CHECK(again.training.epochs == 3);
  // A list, written block style over several lines ("domain_padding:\n    []"),
  // replaced whole by a flow list; the key after it kept.
  fno::record_setting(cfg, "model.domain_padding", "[0, 0.25]");
  const auto padded = fno::parse_config(cfg.resolved_yaml, "config.yaml");
  CHECK(padded.model.domain_padding() == std::vector<double>{0, 0.25});
  CHECK(padded.model.domain_padding_mode() ==
        fno::parse_config(kValid, "c").model.domain_padding_mode());
  fno::record_setting(cfg, "model.domain_padding", "[]");
  CHECK(fno::parse_config(cfg.resolved_yaml, "config.yaml").model.domain_padding().empty());
}

TEST_CASE("data layouts: the Navier-Stokes records have their own") {
  check_error(kValid, "data.x_layout: not used with data.problem ns",
              {"data.problem=ns", "data.x_layout=channels_last", "model.n_modes=[8, 8, 8]"});
  check_error(kValid, "data.y_layout: unknown value 'rows'", {"data.y_layout=rows"});
  CHECK(fno::parse_config(kValid, "cfg.yaml", {"data.x_layout=channels_first"}).data.x_layout ==
        fno::data::Layout::kChannelsFirst);
}

TEST_CASE("a missing file or a directory as the config is a clear error") {
  CHECK_THROWS_WITH_AS(fno::load_config("/nonexistent/cfg.yaml"),
                       doctest::Contains("/nonexistent/cfg.yaml: cannot read the config file"),
                       fno::ConfigError);
  CHECK_THROWS_WITH_AS(fno::load_config(FNO_TEST_OUT_DIR),
                       doctest::Contains("cannot read the config file"), fno::ConfigError);
}

TEST_CASE("configs/README.md documents the schema fno_train uses") {
  std::ifstream in(std::string(FNO_SOURCE_DIR) + "/configs/README.md");
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_MESSAGE(doc.find(fno::config_schema_markdown()) != std::string::npos,
                "configs/README.md is out of date: paste the output of fno_train --print-schema");
}

TEST_CASE("every key of the schema is documented, in configs/README.md too") {
  std::ifstream in(std::string(FNO_SOURCE_DIR) + "/configs/README.md");
  const std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto keys = fno::config_keys();
  std::set<std::string> seen;
  int test_entry_keys = 0;
  const auto markdown = fno::config_schema_markdown();
  for (const auto& k : keys) {
    INFO("key ", k.key);
    CHECK(seen.insert(k.key).second);  // each key once
    CHECK_MESSAGE(k.doc.find_first_not_of(" \t") != std::string::npos, "no documentation");
    test_entry_keys += k.key.rfind("data.test[].", 0) == 0;
    // Its row in the generated reference and in the committed one, with its text.
    const auto name = k.key.rfind("data.test[].", 0) == 0 ? k.key.substr(12) : k.key;
    for (const auto* doc : {&markdown, &readme}) {
      const auto row = doc->find("| `" + name + "` |");
      REQUIRE(row != std::string::npos);
      const auto end = doc->find('\n', row);
      CHECK(doc->substr(row, end - row).find("| " + k.doc + " |") != std::string::npos);
    }
  }
  CHECK(test_entry_keys == 6);  // file, name, first, n_samples, batch_size, split
  // No row beside the generated ones (a stale table left by an earlier paste).
  const auto rows = [](const std::string& text) {
    size_t n = 0;
    for (auto at = text.find("\n| `"); at != std::string::npos; at = text.find("\n| `", at + 1)) {
      ++n;
    }
    return n;
  };
  const auto table = readme.find("| key | type | default | allowed | meaning |");
  const auto end = readme.find("\n## ", table);
  REQUIRE(table != std::string::npos);
  CHECK(rows(readme.substr(table, end - table)) == rows("\n" + markdown));
}

namespace {

// Every field of a RunConfig but the resolved YAML and the notes, by name.
std::map<std::string, std::string> fields(const fno::RunConfig& c) {
  std::map<std::string, std::string> f;
  const auto text = [](const auto& v) {
    std::ostringstream s;
    if constexpr (std::is_enum_v<std::decay_t<decltype(v)>>) {
      s << static_cast<int>(v);
    } else {
      s << v;
    }
    return s.str();
  };
  const auto list = [&](const auto& v) {
    std::string out;
    for (const auto& x : v) out += text(x) + ",";
    return out;
  };
  const auto& m = c.model;
  f["n_modes"] = list(m.n_modes());
  f["in_channels"] = text(m.in_channels());
  f["out_channels"] = text(m.out_channels());
  f["hidden_channels"] = text(m.hidden_channels());
  f["n_layers"] = text(m.n_layers());
  f["lifting_channel_ratio"] = text(m.lifting_channel_ratio());
  f["projection_channel_ratio"] = text(m.projection_channel_ratio());
  f["positional_embedding"] = text(m.positional_embedding());
  f["use_channel_mlp"] = text(m.use_channel_mlp());
  f["single_gelu"] = text(m.single_gelu());
  f["spectral_init"] = text(m.spectral_init());
  f["channel_mlp_expansion"] = text(m.channel_mlp_expansion());
  f["domain_padding"] = list(m.domain_padding());
  f["domain_padding_mode"] = text(m.domain_padding_mode());
  f["domain_padding_auto"] = text(c.domain_padding_auto);
  const auto& d = c.data;
  f["train_file"] = d.train_file;
  f["n_train"] = text(d.n_train);
  f["batch_size"] = text(d.batch_size);
  f["shuffle"] = text(d.shuffle);
  f["subsample"] = text(d.subsample);
  f["x_key"] = d.x_key;
  f["y_key"] = d.y_key;
  f["x_layout"] = text(d.x_layout);
  f["y_layout"] = text(d.y_layout);
  f["encode_input"] = text(d.encode_input);
  f["encode_output"] = text(d.encode_output);
  f["normalization"] = text(d.normalization);
  f["tests"] = text(d.tests.size());
  for (const auto& t : d.tests) {
    f["tests"] += " " + t.file + " " + t.name + " " + text(t.n_samples) + " " + text(t.batch_size) +
                  " " + t.split;
  }
  f["format"] = text(d.format);
  f["split"] = d.split;
  f["fields"] = list(d.fields);
  f["target_fields"] = list(d.target_fields);
  f["history"] = text(d.history);
  f["horizon"] = text(d.horizon);
  f["scalars"] = list(d.scalars);
  f["stream"] = text(d.stream);
  f["data.host_memory_limit"] = text(d.host_memory_limit);
  f["n_predictions"] = text(d.n_predictions);
  f["problem"] = text(d.problem);
  f["ns_mode"] = text(d.ns_mode);
  f["t_in"] = text(d.t_in);
  f["t_out"] = text(d.t_out);
  const auto& o = c.optimizer;
  f["optimizer.name"] = text(o.name);
  f["lr"] = text(o.lr);
  f["weight_decay"] = text(o.weight_decay);
  f["beta1"] = text(o.beta1);
  f["beta2"] = text(o.beta2);
  f["eps"] = text(o.eps);
  const auto& sc = c.scheduler;
  f["scheduler.name"] = text(sc.name);
  f["t_max"] = text(sc.t_max);
  f["eta_min"] = text(sc.eta_min);
  f["step_size"] = text(sc.step_size);
  f["gamma"] = text(sc.gamma);
  f["plateau_factor"] = text(sc.plateau_factor);
  f["plateau_patience"] = text(sc.plateau_patience);
  const auto& t = c.training;
  f["epochs"] = text(t.epochs);
  f["loss"] = text(t.loss);
  f["loss_on"] = text(t.loss_on);
  f["eval_losses"] = list(t.eval_losses);
  f["checkpoint_every"] = text(t.checkpoint_every);
  f["eval_every"] = text(t.eval_every);
  f["seed"] = text(t.seed);
  f["precision"] = text(t.precision);
  f["cuda_graphs"] = text(t.cuda_graphs);
  f["max_grad_norm"] = text(t.max_grad_norm);
  f["device"] = c.device.name;
  f["dir"] = c.output.dir;
  f["progress"] = text(c.output.progress);
  f["progress_every"] = text(c.output.progress_every);
  const auto& p = c.offload;
  f["policy"] = p.policy.text + " " + text(p.policy.kind) + " " + text(p.policy.blocks);
  f["gpu_memory_limit"] = text(p.gpu_memory_limit);
  f["host_memory_limit"] = text(p.host_memory_limit);
  f["chunks"] = text(p.chunks);
  f["micro_batches"] = text(p.micro_batches);
  f["min_bytes"] = text(p.min_bytes);
  f["prefetch_depth"] = text(p.prefetch_depth);
  f["max_inflight_mib"] = text(p.max_inflight_mib);
  f["max_prefetch_mib"] = text(p.max_prefetch_mib);
  f["timeline"] = text(p.timeline);
  f["compress"] = text(p.compress);
  f["plan_cache"] = p.plan_cache;
  f["search_seconds"] = text(p.search_seconds);
  const auto& g = c.distributed;
  f["backend"] = text(g.backend);
  f["timeout_s"] = text(g.timeout_s);
  f["bucket_mib"] = text(g.bucket_mib);
  f["domain_parallel"] = text(g.domain_parallel);
  return f;
}

// The fields of a data.test entry, by name.
std::map<std::string, std::string> fields(const fno::TestSetConfig& t) {
  return {{"file", t.file},
          {"name", t.name},
          {"n_samples", std::to_string(t.n_samples)},
          {"batch_size", std::to_string(t.batch_size)},
          {"split", t.split}};
}

// The fields of `a` equal to those of `b`, but the ones named in `except`.
std::vector<std::string> unchanged(const std::map<std::string, std::string>& a,
                                   const std::map<std::string, std::string>& b,
                                   const std::set<std::string>& except = {}) {
  std::vector<std::string> same;
  for (const auto& [name, value] : a) {
    if (b.at(name) == value && except.count(name) == 0) same.push_back(name + "=" + value);
  }
  return same;
}

// The sample of `key` (config_keys()).
std::string sample_of(const std::string& key) {
  for (const auto& k : fno::config_keys()) {
    if (k.key == key) return k.sample;
  }
  return "";
}

}  // namespace

TEST_CASE("every key reaches its field: set to its sample, every field changes") {
  // One YAML with every key set to its sample (a valid value other than its
  // default), but the Navier-Stokes pair, which limits other keys: below. The
  // keys of a data.test entry come in data.test's sample.
  // (and the keys that need data.format well)
  const std::set<std::string> later{"data.problem", "data.ns_mode", "data.format", "data.scalars",
                                    "model.domain_padding_auto"};
  std::map<std::string, std::string> sections;
  for (const auto& k : fno::config_keys()) {
    INFO("key ", k.key);
    REQUIRE_MESSAGE(!k.sample.empty(), "no sample: declare one with .sample()");
    if (k.key.rfind("data.test[].", 0) == 0 || later.count(k.key) > 0) continue;
    const auto dot = k.key.find('.');
    sections[k.key.substr(0, dot)] += "  " + k.key.substr(dot + 1) + ": " + k.sample + "\n";
  }
  std::string yaml;
  for (const auto& [section, keys] : sections) yaml += section + ":\n" + keys;
  INFO("yaml:\n", yaml);
  const auto base = fno::parse_config("data:\n  train_file: base.pt\n", "cfg.yaml");
  const auto all = fno::parse_config(yaml, "cfg.yaml");
  CHECK(unchanged(fields(all), fields(base),
                  {"problem", "ns_mode", "format", "scalars", "domain_padding_auto"}) ==
        std::vector<std::string>{});
  REQUIRE(all.data.tests.size() == 1);
  CHECK(unchanged(fields(all.data.tests[0]), fields(fno::TestSetConfig{})) ==
        std::vector<std::string>{});
  // The Navier-Stokes pair, with what its recurrent rollout needs.
  const auto ns = fno::parse_config(
      "data:\n  train_file: base.pt\n", "cfg.yaml",
      {"data.problem=" + sample_of("data.problem"), "data.ns_mode=" + sample_of("data.ns_mode"),
       "data.encode_output=false", "training.eval_losses=[l2]"});
  CHECK(fields(ns)["problem"] != fields(base)["problem"]);
  CHECK(fields(ns)["ns_mode"] != fields(base)["ns_mode"]);
  // A benchmark format, which refuses the loaders' own keys (x_key, layouts).
  const auto bench = fno::parse_config("data:\n  train_file: base\n", "cfg.yaml",
                                       {"data.format=" + sample_of("data.format")});
  CHECK(fields(bench)["format"] != fields(base)["format"]);
  // The Well's scalars and the padding from its boundary conditions.
  const auto well =
      fno::parse_config("data:\n  train_file: base\n", "cfg.yaml",
                        {"data.format=well", "data.scalars=" + sample_of("data.scalars"),
                         "model.domain_padding_auto=" + sample_of("model.domain_padding_auto")});
  CHECK(fields(well)["scalars"] != fields(base)["scalars"]);
  CHECK(fields(well)["domain_padding_auto"] != fields(base)["domain_padding_auto"]);
}

TEST_CASE("every key alone, set to its sample by --set, changes the settings") {
  for (const auto& k : fno::config_keys()) {
    if (k.key.rfind("data.test[].", 0) == 0) continue;  // data.test's sample has them
    // model.single_gelu needs use_channel_mlp false.
    std::vector<std::string> sets;
    if (k.key == "model.single_gelu") sets.push_back("model.use_channel_mlp=false");
    // The Well's keys need its format.
    if (k.key == "data.scalars" || k.key == "model.domain_padding_auto")
      sets.push_back("data.format=well");
    const auto base = fields(fno::parse_config(kValid, "cfg.yaml", sets));
    sets.push_back(k.key + "=" + k.sample);
    INFO("--set ", sets.back());
    CHECK(fields(fno::parse_config(kValid, "cfg.yaml", sets)) != base);
  }
}
