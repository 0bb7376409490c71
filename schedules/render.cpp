// Renderers. JSON and SVG are written by hand: the output is small and flat.
#include "schedules/render.h"
#include "schedules/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace trident::sched {

namespace {

std::string num(double x) { return general(x); }

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string summary(const Timeline& t, const TimelineStats& st, const std::string& title) {
  char buf[160];
  std::snprintf(buf, sizeof buf, " p=%d m=%d v=%d: step %.4g, bubble %.2f%%", t.pipeline_ranks, t.microbatches, t.chunks,
                st.step_time, 100.0 * st.bubble_fraction);
  return title + buf;
}

const char* kind_name(ActionKind k) {
  switch (k) {
    case ActionKind::F: return "forward";
    case ActionKind::B: return "backward";
    case ActionKind::I: return "backward-input";
    case ActionKind::W: return "backward-weight";
    case ActionKind::REDUCE_GRAD: return "reduce-grad";
    default: return "comm";
  }
}

}  // namespace

std::string render_text(const Timeline& t, const std::string& title) {
  const TimelineStats st = stats(t);
  double unit = 0;  // shortest compute action: one grid cell
  size_t width = 2;
  for (const auto& list : t.ranks)
    for (const TimedAction& a : list)
      if (is_compute(a.action.kind) && a.end > a.start) {
        unit = unit == 0 ? a.end - a.start : std::min(unit, a.end - a.start);
        width = std::max(width, to_token(a.action).size() + 1);
      }
  std::string out = summary(t, st, title) + "\n";
  if (unit == 0) return out;
  unit = std::max(unit, st.step_time / 300);  // keep rows printable
  const size_t cols = static_cast<size_t>(std::lround(st.step_time / unit)) * width;
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    std::string row(cols, '.');
    for (const TimedAction& a : t.ranks[r]) {
      if (!is_compute(a.action.kind)) continue;
      const size_t c0 = static_cast<size_t>(std::lround(a.start / unit)) * width;
      const size_t c1 = std::min(cols, static_cast<size_t>(std::lround(a.end / unit)) * width);
      if (c1 <= c0) continue;
      const std::string tok = to_token(a.action);
      for (size_t c = c0; c < c1; ++c) row[c] = c - c0 < tok.size() ? tok[c - c0] : ' ';
      row[c1 - 1] = '|';
    }
    char label[32];
    std::snprintf(label, sizeof label, "rank %-3zu ", r);
    out += label + row + "\n";
  }
  return out;
}

std::string render_json(const Timeline& t, const std::string& title) {
  const TimelineStats st = stats(t);
  std::string out = "{\n  \"title\": " + json_string(title) + ",\n  \"pipeline_ranks\": " + std::to_string(t.pipeline_ranks) +
                    ",\n  \"microbatches\": " + std::to_string(t.microbatches) + ",\n  \"chunks\": " +
                    std::to_string(t.chunks) + ",\n  \"step_time\": " + num(st.step_time) +
                    ",\n  \"bubble_fraction\": " + num(st.bubble_fraction) + ",\n  \"busy\": [";
  for (size_t r = 0; r < st.busy.size(); ++r) out += (r ? ", " : "") + num(st.busy[r]);
  out += "],\n  \"peak_inflight\": [";
  for (size_t r = 0; r < st.peak_inflight.size(); ++r) out += (r ? ", " : "") + std::to_string(st.peak_inflight[r]);
  out += "],\n  \"timelines\": [";
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    out += r ? ",\n    [" : "\n    [";
    for (size_t i = 0; i < t.ranks[r].size(); ++i) {
      const TimedAction& a = t.ranks[r][i];
      out += (i ? ", " : "") + std::string("{\"action\": ") + json_string(to_token(a.action)) +
             ", \"start\": " + num(a.start) + ", \"end\": " + num(a.end) + "}";
    }
    out += "]";
  }
  return out + "\n  ]\n}\n";
}

std::string render_svg(const Timeline& t, const std::string& title) {
  const TimelineStats st = stats(t);
  const double left = 70, top = 40, row_h = 30, plot_w = 1000;
  const double scale = st.step_time > 0 ? plot_w / st.step_time : 1.0;
  const double height = top + row_h * t.ranks.size() + 60;
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(left + plot_w + 20) + "\" height=\"" +
                    num(height) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  out += "<title>" + xml_escape(summary(t, st, title)) + "</title>\n";
  out += "<text x=\"" + num(left) + "\" y=\"22\" font-size=\"15\">" + xml_escape(summary(t, st, title)) + "</text>\n";
  // Shade by kind: F light, I mid, B dark, W darkest; hue by micro-batch.
  auto lightness = [](ActionKind k) { return k == ActionKind::F ? 78 : k == ActionKind::I ? 58 : k == ActionKind::B ? 48 : 34; };
  auto hue = [&](int mb) { return std::fmod(mb * 137.508, 360.0); };
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    const double y = top + row_h * r;
    out += "<text x=\"8\" y=\"" + num(y + row_h * 0.65) + "\">rank " + std::to_string(r) + "</text>\n";
    out += "<rect x=\"" + num(left) + "\" y=\"" + num(y + 2) + "\" width=\"" + num(plot_w) + "\" height=\"" +
           num(row_h - 4) + "\" fill=\"#eeeeee\"/>\n";  // idle shows through as grey
    for (const TimedAction& a : t.ranks[r]) {
      if (!is_compute(a.action.kind) || a.end <= a.start) continue;
      const double x = left + a.start * scale, w = (a.end - a.start) * scale;
      const int l = lightness(a.action.kind);
      out += "<rect x=\"" + num(x) + "\" y=\"" + num(y + 2) + "\" width=\"" + num(w) + "\" height=\"" +
             num(row_h - 4) + "\" fill=\"hsl(" + num(hue(a.action.mb)) + ",65%," + std::to_string(l) +
             "%)\" stroke=\"white\" stroke-width=\"1\"><title>" + to_token(a.action) + " " + num(a.start) + "-" +
             num(a.end) + "</title></rect>\n";
      if (w >= 14)
        out += "<text x=\"" + num(x + 2) + "\" y=\"" + num(y + row_h * 0.65) + "\" fill=\"" +
               (l < 50 ? "white" : "black") + "\">" + to_token(a.action) + "</text>\n";
    }
  }
  const double ly = top + row_h * t.ranks.size() + 25;
  const char* names[] = {"F forward", "I input grad", "B backward", "W weight grad", "idle"};
  const ActionKind kinds[] = {ActionKind::F, ActionKind::I, ActionKind::B, ActionKind::W};
  for (int k = 0; k < 5; ++k) {
    const double x = left + k * 150;
    const std::string fill = k < 4 ? "hsl(0,0%," + std::to_string(lightness(kinds[k])) + "%)" : "#eeeeee";
    out += "<rect x=\"" + num(x) + "\" y=\"" + num(ly) + "\" width=\"18\" height=\"14\" fill=\"" + fill +
           "\" stroke=\"#999\"/><text x=\"" + num(x + 24) + "\" y=\"" + num(ly + 11) + "\">" + names[k] + "</text>\n";
  }
  out += "<text x=\"" + num(left + 750) + "\" y=\"" + num(ly + 11) + "\">hue = micro-batch, time in cost units</text>\n";
  return out + "</svg>\n";
}

std::string render_chrome(const Timeline& t, const std::string& title) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"title\": " + json_string(title) +
                    "}, \"traceEvents\": [\n";
  bool first = true;
  auto emit = [&](const std::string& ev) {
    out += (first ? "  " : ",\n  ") + ev;
    first = false;
  };
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    const std::string ids = "\"pid\": " + std::to_string(r) + ", \"tid\": " + std::to_string(r);
    emit("{\"name\": \"process_name\", \"ph\": \"M\", " + ids + ", \"args\": {\"name\": \"rank " +
         std::to_string(r) + "\"}}");
    for (const TimedAction& a : t.ranks[r]) {
      const bool compute = is_compute(a.action.kind);
      if (!compute && a.end <= a.start) continue;  // only waits of receives are worth drawing
      const std::string name = compute ? to_token(a.action) : "wait " + to_token(a.action);
      emit("{\"name\": " + json_string(name) + ", \"cat\": \"" + kind_name(a.action.kind) +
           "\", \"ph\": \"X\", " + ids + ", \"ts\": " + num(a.start * t.us_per_unit) +
           ", \"dur\": " + num((a.end - a.start) * t.us_per_unit) + ", \"args\": {\"mb\": " +
           std::to_string(a.action.mb) + ", \"chunk\": " + std::to_string(a.action.chunk) + "}}");
    }
  }
  return out + "\n]}\n";
}

}  // namespace trident::sched
