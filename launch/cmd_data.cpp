// `trident data prepare|text|info|batches`: build token files, show a Brown file's
// running text, print a token file's header, print the samples training reads.
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "datasets/brown.h"
#include "datasets/documents.h"
#include "datasets/megatron_dataset.h"
#include "datasets/megatron_samples.h"
#include "datasets/prepare.h"
#include "datasets/token_file.h"
#include "datasets/training_data.h"
#include "framework/config_tables.h"
#include "launch/commands.h"
#include "launch/options.h"

namespace trident::cli {
namespace {

namespace po = boost::program_options;

constexpr const char* kUsage =
    "usage: trident data prepare --tokenizer byte|gpt2|hf [--tokenizer-dir D] --input PATH... --output PREFIX\n"
    "                            [--val-fraction 0.05] [--format text|brown|jsonl|prompt-completion]\n"
    "                            [--json-key text]\n"
    "                            [--skip-bad-lines] [--allow-invalid-utf8] [--output-format trident|megatron]\n"
    "                            [--threads N] [--eod-token ID] [--pack-seq-len L] [--overlong refuse|truncate]\n"
    "       trident data text FILE        (running text of a Brown file)\n"
    "       trident data info FILE.bin    (header of a token file)\n"
    "       trident data info PREFIX      (counts of a Megatron dataset PREFIX.bin + PREFIX.idx)\n"
    "       trident data batches --config FILE [--set section.key=value]... --steps N\n"
    "                                     (the samples of each global batch training reads, as JSON lines)\n";

// Parses options; returns false after printing help.
bool parse(int argc, char** argv, const po::options_description& opts, po::variables_map& vm) {
  po::store(po::parse_command_line(argc, argv, opts), vm);
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return false;
  }
  po::notify(vm);
  return true;
}

// A progress bar on stderr when it is a terminal: bytes done, share and rate.
class ProgressBar {
 public:
  ProgressBar() : on_(isatty(STDERR_FILENO) != 0), start_(std::chrono::steady_clock::now()) {}
  ~ProgressBar() { finish(); }
  void finish() {  // ends the bar's line
    if (drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }
  void operator()(uint64_t done, uint64_t total) {
    if (!on_ || total == 0) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double f = std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
    constexpr int kWidth = 30;
    const int fill = static_cast<int>(f * kWidth);
    std::fprintf(stderr, "\r[%s%s] %5.1f%%  %.1f / %.1f MB  %.1f MB/s", std::string(fill, '#').c_str(),
                 std::string(kWidth - fill, ' ').c_str(), 100 * f, done / 1e6, total / 1e6,
                 s > 0 ? done / 1e6 / s : 0.0);
    std::fflush(stderr);
    drawn_ = true;
  }

 private:
  bool on_, drawn_ = false;
  std::chrono::steady_clock::time_point start_;
};

// The options that contradict each other, refused before anything is read.
void check_prepare_options(data::PrepareOptions& o, const po::variables_map& vm) {
  const bool jsonl = o.format == "jsonl" || o.format == "prompt-completion";
  if (!jsonl && !vm["json-key"].defaulted())
    throw BadInput("--json-key reads JSONL lines: it needs --format jsonl, got --format " + o.format);
  if (o.format == "prompt-completion" && !vm["json-key"].defaulted())
    throw BadInput("--json-key with --format prompt-completion: its lines hold \"prompt\" and \"completion\" "
                   "(or \"text\")");
  if (o.format != "jsonl" && o.skip_bad_lines)
    throw BadInput("--skip-bad-lines skips JSONL lines: it needs --format jsonl, got --format " + o.format);
  if (o.allow_invalid_utf8 && o.tokenizer == "byte")
    throw BadInput("--allow-invalid-utf8 is for --tokenizer gpt2 or hf: byte takes any bytes");
  for (const char* key : {"pack-seq-len", "overlong", "eod-token"})
    if (vm.count(key) && !vm[key].defaulted() && o.format != "prompt-completion")
      throw BadInput(std::string("--") + key + " packs prompt-completion examples: it needs --format "
                     "prompt-completion, got --format " + o.format);
  if (!vm["overlong"].defaulted() && o.pack_seq_len == 0)
    throw BadInput("--overlong " + o.overlong + " says what packing does with a long example: it needs "
                   "--pack-seq-len L (without packing every example is its own sequence)");
  if (o.format == "prompt-completion" && o.output_format != "megatron")
    throw BadInput("--format prompt-completion writes a Megatron dataset and its loss mask: it needs "
                   "--output-format megatron, got " + o.output_format);
  if (o.output_format == "megatron") {
    if (!vm["val-fraction"].defaulted())
      throw BadInput("--val-fraction with --output-format megatron: a Megatron dataset holds every "
                               "document and training cuts it with data.split (e.g. \"969,30,1\")");
    o.val_fraction = 0;
  }
}

void print_summary(const data::PrepareOptions& o, const data::PrepareSummary& s) {
  std::printf("prepared %llu documents (%llu bytes of text) with tokenizer %s\n",
              static_cast<unsigned long long>(s.train_docs + s.val_docs),
              static_cast<unsigned long long>(s.text_bytes), o.tokenizer.c_str());
  const auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  if (o.format == "prompt-completion") {
    std::printf("  %llu prompt-completion examples, %llu text documents: %llu tokens counted in the loss, %llu "
                "not (prompts, padding excluded)\n", u(s.examples), u(s.texts), u(s.loss_tokens), u(s.prompt_tokens));
    if (o.pack_seq_len > 0)
      std::printf("  packed into %llu sequences of %lld tokens: %llu padding tokens (%.1f%%), %llu examples "
                  "truncated\n", u(s.sequences), static_cast<long long>(o.pack_seq_len), u(s.pad_tokens),
                  s.train_tokens ? 100.0 * static_cast<double>(s.pad_tokens) / static_cast<double>(s.train_tokens) : 0.0,
                  u(s.truncated));
    std::printf("  megatron: %llu sequences, %llu tokens -> %s, %s, %s\n", u(s.sequences), u(s.train_tokens),
                s.files_written.at(0).c_str(), s.files_written.at(1).c_str(), s.files_written.at(2).c_str());
    return;
  }
  if (o.output_format == "megatron") {
    std::printf("  megatron: %llu docs, %llu tokens -> %s, %s\n", static_cast<unsigned long long>(s.train_docs),
                static_cast<unsigned long long>(s.train_tokens), s.files_written.at(0).c_str(),
                s.files_written.at(1).c_str());
  } else {
    std::printf("  train: %llu docs, %llu tokens -> %s\n", static_cast<unsigned long long>(s.train_docs),
                static_cast<unsigned long long>(s.train_tokens), s.files_written.at(0).c_str());
    std::printf("  val:   %llu docs, %llu tokens -> %s\n", static_cast<unsigned long long>(s.val_docs),
                static_cast<unsigned long long>(s.val_tokens), s.files_written.at(1).c_str());
    if (s.val_docs == 0 && o.val_fraction > 0)  // floor(n f) documents validate: fewer than 1/f give none
      std::printf("  note: --val-fraction %g puts none of the %llu documents in validation (it needs at least %.0f); "
                  "train with training.eval_interval = 0\n",
                  o.val_fraction, static_cast<unsigned long long>(s.train_docs), std::ceil(1.0 / o.val_fraction - 1e-9));
  }
  if (s.bad_lines > 0) std::printf("  skipped %llu bad lines\n", static_cast<unsigned long long>(s.bad_lines));
}

int prepare(int argc, char** argv) {
  data::PrepareOptions o;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  po::options_description opts(
      "usage: trident data prepare [options]\n"
      "Tokenizes documents and writes PREFIX.train.bin and PREFIX.val.bin (Trident's token\n"
      "files), or with --output-format megatron PREFIX.bin and PREFIX.idx (Megatron-LM's\n"
      "indexed dataset, one sequence per document, every document: training cuts it with\n"
      "data.split). A text or Brown input file is one document; a folder is its files sorted\n"
      "by name (Brown document names only with --format brown); with --format jsonl each\n"
      "line is a JSON object whose --json-key member is a document. Document i goes to\n"
      "validation iff floor((i+1)f) > floor(if). gpt2 appends its end-of-text id 50256 after\n"
      "every document; byte adds no separator (its 256 ids are the bytes); hf appends its\n"
      "special token <|endoftext|> or <|end_of_text|> when it has one (else nothing) and\n"
      "records the tokenizer as hf:<FNV-1a 64 of tokenizer.json, 16 hex digits>. The output\n"
      "is the same for any --threads");
  opts.add_options()("help,h", "show this help")(
      "tokenizer", po::value(&o.tokenizer)->default_value("byte"), "byte | gpt2 | hf")(
      "tokenizer-dir", po::value(&o.tokenizer_dir),
      "gpt2 vocabulary folder (default: see `trident tokenize --help`); hf: the folder of tokenizer.json (required)")(
      "input", po::value(&o.inputs)->multitoken()->required(), "input files and/or folders")(
      "output", po::value(&o.output_prefix)->required(), "output prefix")(
      "val-fraction", po::value(&o.val_fraction)->default_value(0.05, "0.05"),
      "share of documents for validation (trident output; megatron output takes none)")(
      "format", po::value(&o.format)->default_value("text"),
      "text | brown (tagged Brown corpus files) | jsonl | prompt-completion (JSONL of \"prompt\" and \"completion\", "
      "or \"text\": a Megatron dataset and PREFIX.lossmask, the loss on completions only; datasets/prepare.h)")(
      "json-key", po::value(&o.json_key)->default_value("text"), "jsonl: the member holding each line's document")(
      "skip-bad-lines", po::bool_switch(&o.skip_bad_lines),
      "jsonl: skip a line that is not an object with a string --json-key member, and count it (default: fail "
      "naming file and line)")(
      "allow-invalid-utf8", po::bool_switch(&o.allow_invalid_utf8),
      "gpt2/hf: tokenize a document that is not UTF-8 as its bytes (default: fail naming the file)")(
      "output-format", po::value(&o.output_format)->default_value("trident"), "trident | megatron")(
      "threads", po::value(&o.threads)->default_value(static_cast<int>(cores)), "tokenizing threads (default: all cores)")(
      "eod-token", po::value(&o.eod_token)->default_value(-1),
      "prompt-completion: the id ending each example (default: the tokenizer's end-of-text; byte has none)")(
      "pack-seq-len", po::value(&o.pack_seq_len)->default_value(0),
      "prompt-completion: pack examples into sequences of L tokens, padded with the eod (0: one example a sequence)")(
      "overlong", po::value(&o.overlong)->default_value("refuse"),
      "packing: an example longer than --pack-seq-len is refused (refuse) or cut to L tokens ending in the eod "
      "(truncate)");
  po::variables_map vm;
  if (!parse(argc, argv, opts, vm)) return 0;
  check_prepare_options(o, vm);
  ProgressBar bar;
  o.progress = [&bar](uint64_t done, uint64_t total) { bar(done, total); };
  const auto t0 = std::chrono::steady_clock::now();
  const auto s = o.format == "prompt-completion" ? data::prepare_prompt_completion(o) : data::prepare_token_files(o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  bar.finish();
  print_summary(o, s);
  const double tokens = static_cast<double>(s.train_tokens + s.val_tokens);
  std::printf("throughput: %.3f s, %.2f MB/s of input, %.3f M tokens/s, %d threads\n", secs,
              static_cast<double>(s.input_bytes) / 1e6 / secs, tokens / 1e6 / secs, o.threads);
  return 0;
}

int text(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << "usage: trident data text FILE\nPrints the running text of a tagged Brown corpus file.\n";
    return argc == 2 ? 0 : 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) throw BadInput(std::string("cannot read ") + argv[1]);
  std::ostringstream ss;
  ss << in.rdbuf();
  std::cout << data::brown_to_text(ss.str());
  return 0;
}

int info(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << "usage: trident data info FILE.bin | PREFIX\nChecks a token file and prints its header, or a "
                 "Megatron dataset (PREFIX.bin + PREFIX.idx) and prints its index's counts.\n";
    return argc == 2 ? 0 : 2;
  }
  const std::string arg = argv[1];
  std::error_code ec;
  if (std::filesystem::is_regular_file(arg + ".idx", ec)) {
    const data::MegatronDataset ds(arg);
    std::printf("%s: Megatron indexed dataset, dtype code %u (%s), %llu tokens, %llu sequences, %llu documents\n",
                arg.c_str(), static_cast<unsigned>(ds.dtype_code()), ds.dtype_code() == 8 ? "uint16" : "int32",
                static_cast<unsigned long long>(ds.tokens().size()),
                static_cast<unsigned long long>(ds.sequence_count()),
                static_cast<unsigned long long>(ds.document_count()));
    return 0;
  }
  const data::TokenFile f(argv[1]);
  const auto& h = f.info();
  std::printf("%s: version %u, %u bytes/token, %llu tokens, %llu documents, tokenizer %s, vocab %u\n", argv[1],
              h.version, h.dtype_bytes, static_cast<unsigned long long>(h.token_count),
              static_cast<unsigned long long>(h.doc_count), h.tokenizer.c_str(), h.vocab_size);
  return 0;
}

// One global batch as JSON arrays, a sample at a time.
struct BatchJson {
  std::string tokens, labels, positions, loss, cu;
};

template <class T>
void append_array(std::string& out, const T* v, size_t n) {
  out += out.empty() ? "[" : ", [";
  for (size_t k = 0; k < n; ++k) out += (k ? "," : "") + std::to_string(v[k]);
  out += "]";
}

// Sample `id`'s tokens and labels, and with data.reset_* / eod_mask_loss / completion_only_loss
// its position ids, loss mask (0 or 1) and document boundaries (NOTE [sample documents]).
void add_sample(BatchJson& b, const TrainingData& data, int64_t id, int64_t seq) {
  std::vector<int64_t> sample(static_cast<size_t>(seq + 1));
  data.samples->copy_sample(id, sample.data());
  const auto n = static_cast<size_t>(seq);
  append_array(b.tokens, sample.data(), n);
  append_array(b.labels, sample.data() + 1, n);
  if (!data.documents.any()) return;
  std::vector<uint8_t> mask;
  if (data.documents.completion_only_loss) {
    mask.resize(n + 1);
    data.samples->copy_sample_loss_mask(id, mask.data());
  }
  const data::SampleDocuments d =
      data::sample_documents(sample.data(), mask.empty() ? nullptr : mask.data(), seq, data.documents);
  append_array(b.positions, d.position_ids.data(), n);
  std::vector<int> loss(d.loss_mask.begin(), d.loss_mask.end());
  append_array(b.loss, loss.data(), n);
  append_array(b.cu, d.cu_seqlens.data(), d.cu_seqlens.size());
}

int batches(int argc, char** argv) {
  std::string config_path;
  std::vector<std::string> sets;
  int64_t steps = 0;
  po::options_description opts(
      "usage: trident data batches --config FILE [--set section.key=value]... --steps N\n"
      "Prints the first N global batches `trident train` reads with this config, one JSON\n"
      "object a line: {\"step\": S, \"tokens\": [[...], ...], \"labels\": [[...], ...]}, S from 1\n"
      "as in metrics.jsonl, the batch's training.global_batch_size samples in global order\n"
      "(data.order \"stream\": each data-parallel rank's block in rank order; \"megatron\": each\n"
      "micro-step's dp x micro_batch_size samples, rank 0's micro-batch first, as Megatron's\n"
      "sampler hands them out), each sample's model.seq_len input tokens and the labels (the\n"
      "same window shifted by one). With data.reset_position_ids, reset_attention_mask,\n"
      "eod_mask_loss or completion_only_loss also \"position_ids\", \"loss_mask\" (0 or 1) and\n"
      "\"cu_seqlens\" (each sample's document boundaries, 0 .. seq_len; datasets/documents.h).\n"
      "Any data.source, data.format and data.order; nothing is\n"
      "trained. With data.cache_dir the train split's index caches it lacks are written there,\n"
      "as a run's rank 0 writes them");
  opts.add_options()("help,h", "show this help")("config,c", po::value(&config_path), "TOML config file")(
      "set,s", po::value(&sets)->composing(), "override one key, e.g. --set data.order=stream (repeatable)")(
      "steps", po::value(&steps), "global batches to print (at most training.steps)");
  po::variables_map vm;
  if (!parse(argc, argv, opts, vm)) return 0;
  if (config_path.empty()) throw BadInput("--config FILE is required (see trident data batches --help)");
  if (!vm.count("steps")) throw BadInput("--steps N is required: the global batches to print");
  const Config cfg = load_checked_config(config_path, sets);
  if (steps < 1 || steps > cfg.training.steps)
    throw BadInput("--steps " + std::to_string(steps) + ": expected 1 .. training.steps = " +
                   std::to_string(cfg.training.steps) + " (a run reads no more; raise training.steps with --set)");
  const auto data = open_training_data(cfg, "train", /*write_caches=*/true);  // one process: it writes
  if (const auto* m = dynamic_cast<const data::MegatronSamples*>(data->samples.get()); m && !cfg.data.cache_dir.empty())
    std::fprintf(stderr, "data.cache_dir: the indices of %zu of %zu datasets read from %s, %zu written there\n",
                 m->cached(), m->datasets(), cfg.data.cache_dir.c_str(), m->written());
  const int64_t seq = cfg.model.seq_len, G = cfg.training.global_batch_size;
  for (int64_t step = 0; step < steps; ++step) {
    BatchJson b;
    for (int64_t id : data->samples->global_batch(step, G)) add_sample(b, *data, id, seq);
    std::string line = "{\"step\": " + std::to_string(step + 1) + ", \"tokens\": [" + b.tokens + "], \"labels\": [" +
                       b.labels + "]";
    if (data->documents.any())
      line += ", \"position_ids\": [" + b.positions + "], \"loss_mask\": [" + b.loss + "], \"cu_seqlens\": [" + b.cu + "]";
    line += "}\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  return 0;
}

}  // namespace

int cmd_data(int argc, char** argv) {
  const std::string sub = argc >= 2 ? argv[1] : "";
  if (sub == "prepare") return prepare(argc - 1, argv + 1);
  if (sub == "text") return text(argc - 1, argv + 1);
  if (sub == "info") return info(argc - 1, argv + 1);
  if (sub == "batches") return batches(argc - 1, argv + 1);
  if (sub == "--help" || sub == "-h") {
    std::cout << kUsage;
    return 0;
  }
  std::cerr << kUsage;
  return 2;
}

}  // namespace trident::cli
