// Megatron's pipeline layout and its accounted even split: see pipeline_layout.h.
#include "core/pipeline_layout.h"

#include <cctype>
#include <stdexcept>

namespace trident {

namespace {

// Far beyond any model's layers; keeps a typo like (t|)*99999999 from allocating.
constexpr size_t kMaxExpanded = 1000000;

std::string at(size_t pos) { return " at position " + std::to_string(pos); }

[[noreturn]] void bad(const std::string& msg) { throw std::invalid_argument(msg); }

// The repeat count after the '*' at text[star]; advances `i` past it.
int64_t repeat_count(const std::string& text, size_t star, size_t& i) {
  i = star + 1;
  if (i >= text.size() || !std::isdigit(static_cast<unsigned char>(text[i])))
    bad("'*'" + at(star) + " must be followed by a repeat count (a whole number)");
  int64_t n = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    n = n * 10 + (text[i] - '0');
    if (n > static_cast<int64_t>(kMaxExpanded)) bad("repeat count" + at(star + 1) + " is too large");
  }
  if (i < text.size() && text[i] == '*') bad("a second '*'" + at(i) + ": one repeat count per item");
  return n;
}

void append(std::string& out, const std::string& piece, int64_t times) {
  if (static_cast<size_t>(times) * piece.size() + out.size() > kMaxExpanded)
    bad("the layout expands to more than " + std::to_string(kMaxExpanded) + " characters");
  for (int64_t k = 0; k < times; ++k) out += piece;
}

bool layer_char(char ch) { return ch == 'E' || ch == 't' || ch == 'L' || ch == 'm' || ch == '|'; }

// Expands text[begin, end) holding no parentheses: characters, ',' and x*N.
std::string expand_plain(const std::string& text, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end;) {
    const char ch = text[i];
    if (ch == ',') {
      ++i;
      continue;
    }
    if (ch == '*') bad("'*'" + at(i) + " repeats nothing: write x*N or (...)*N");
    if (!layer_char(ch))
      bad("unknown character '" + std::string(1, ch) + "'" + at(i) +
          " (known: E embedding, t transformer layer, L loss, m multi-token prediction, | ends a stage, "
          "',' (cosmetic), (...)*N and x*N repeat)");
    size_t next = i + 1;
    int64_t times = 1;
    if (next < end && text[next] == '*') times = repeat_count(text.substr(0, end), next, next);
    append(out, std::string(1, ch), times);
    i = next;
  }
  return out;
}

}  // namespace

std::vector<std::string> parse_pipeline_layout(const std::string& text) {
  std::string flat;
  for (size_t i = 0; i < text.size();) {
    const char ch = text[i];
    if (ch == ')') bad("')'" + at(i) + " closes no '('");
    if (ch != '(') {
      size_t end = text.find_first_of("()", i);
      if (end == std::string::npos) end = text.size();
      const std::string piece = expand_plain(text, i, end);
      append(flat, piece, 1);
      i = end;
      continue;
    }
    const size_t close = text.find(')', i + 1);
    if (close == std::string::npos) bad("'('" + at(i) + " is never closed");
    const size_t inner = text.find('(', i + 1);
    if (inner < close) bad("nested '('" + at(inner) + ": groups have one level, as in Megatron's syntax");
    if (close == i + 1) bad("empty group '()'" + at(i));
    if (close + 1 >= text.size() || text[close + 1] != '*')
      bad("group '(...)'" + at(i) + " needs a repeat count: (...)*N");
    size_t next = 0;
    const int64_t times = repeat_count(text, close + 1, next);
    append(flat, expand_plain(text, i + 1, close), times);
    i = next;
  }
  std::vector<std::string> stages(1);
  for (char ch : flat) {
    if (ch == '|')
      stages.emplace_back();
    else
      stages.back() += ch;
  }
  return stages;
}

std::vector<int64_t> layout_chunk_layers(const std::vector<std::string>& stages, int64_t layers, int64_t pp,
                                         int64_t chunks_per_rank) {
  const int64_t chunks = pp * chunks_per_rank, n = static_cast<int64_t>(stages.size());
  if (n != chunks)
    bad("has " + std::to_string(n) + " stage(s) but parallel.pp (" + std::to_string(pp) + ") x schedule.chunks (" +
        std::to_string(chunks_per_rank) + ") = " + std::to_string(chunks) + " ('|' separates stages)");
  std::string all;
  std::vector<int64_t> counts;
  for (int64_t s = 0; s < n; ++s) {
    if (stages[s].empty())
      bad("stage " + std::to_string(s) + " is empty: every model chunk needs a transformer layer (t), the embedding (E) "
          "or the loss (L)");
    int64_t t = 0;
    for (char ch : stages[s]) t += ch == 't';
    counts.push_back(t);
    all += stages[s];
  }
  if (all.find('m') != std::string::npos)
    bad("'m' (a multi-token prediction layer) is not supported: Trident's models have none");
  auto count = [&](char ch) {
    int64_t k = 0;
    for (char x : all) k += x == ch;
    return k;
  };
  if (count('E') != 1) bad("expected the embedding (E) exactly once, found it " + std::to_string(count('E')) + " time(s)");
  if (count('L') != 1) bad("expected the loss (L) exactly once, found it " + std::to_string(count('L')) + " time(s)");
  if (all.front() != 'E') bad("the embedding (E) must come first: it starts stage 0");
  if (all.back() != 'L') bad("the loss (L) must come last: it ends the last stage");
  if (count('t') != layers)
    bad("holds " + std::to_string(count('t')) + " transformer layer(s) (t) but model.layers = " + std::to_string(layers));
  return counts;
}

std::vector<int64_t> accounted_chunk_layers(int64_t layers, int64_t pp, int64_t chunks_per_rank, bool embedding,
                                            bool loss) {
  const int64_t chunks = pp * chunks_per_rank, total = layers + embedding + loss;
  if (total % chunks != 0)
    bad("model.layers (" + std::to_string(layers) + ")" + (embedding ? " + 1 for the embedding" : "") +
        (loss ? " + 1 for the loss" : "") + " = " + std::to_string(total) + " must be divisible by parallel.pp (" +
        std::to_string(pp) + ") x schedule.chunks (" + std::to_string(chunks_per_rank) + ") = " +
        std::to_string(chunks));
  std::vector<int64_t> counts(chunks, total / chunks);
  counts.front() -= embedding;  // total >= chunks, so each chunk gets >= 1 before these
  counts.back() -= loss;
  return counts;
}

std::vector<int64_t> chunk_layers(const Config& c) {
  const ParallelConfig& p = c.parallel;
  if (!p.pipeline_layout.empty())
    return layout_chunk_layers(parse_pipeline_layout(p.pipeline_layout), c.model.layers, p.pp, chunks_per_rank(c));
  if (p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split)
    return accounted_chunk_layers(c.model.layers, p.pp, chunks_per_rank(c), p.account_for_embedding_in_pipeline_split,
                                  p.account_for_loss_in_pipeline_split);
  return p.pipeline_layers;
}

}  // namespace trident
