// Renderers of a Timeline (simulated or measured): text grid, JSON, SVG and
// Chrome trace (Perfetto-openable). All take the same Timeline struct.
#pragma once

#include <string>

#include "schedules/simulate.h"

namespace trident::sched {

// Rank rows on a time axis: compute boxes labelled with their token, '.' idle;
// a first line with the title, step time and bubble.
std::string render_text(const Timeline& t, const std::string& title);
// {"title","stages","microbatches","chunks","step_time","bubble_fraction",
//  "busy":[...],"peak_inflight":[...],"timelines":[[{"action","start","end"},...],...]}
std::string render_json(const Timeline& t, const std::string& title);
// Standalone SVG: ranks as rows, boxes coloured by micro-batch, F/B/I/W told
// apart by shade and label, idle visible as the lane background, a legend, and
// the bubble in the title.
std::string render_svg(const Timeline& t, const std::string& title);
// {"traceEvents":[...]} with one "X" event per compute action and per RECV that
// waited; pid = rank; ts/dur in microseconds (Timeline::us_per_unit).
std::string render_chrome(const Timeline& t, const std::string& title);

}  // namespace trident::sched
