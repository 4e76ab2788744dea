#pragma once
// Pictures of a timeline (per rank: actions with start and end times), from the simulator or measured by the
// runtime: a text Gantt chart for terminals and logs, and an SVG drawing.
#include <string>
#include <vector>

#include "kpipe/schedule/simulate.hpp"

namespace kpipe::schedule {

using Timeline = std::vector<std::vector<Span>>;  // per rank; messages are ignored

struct GanttOptions {
  int max_width = 160;  // most columns for the time axis; 0: as wide as the labels need
};

// One row per rank, time in columns: each action is its token (F3, B3.1, W2, S) padded to its length, '.'
// marks idle time; a time axis on top. Labels are shortened when the scale leaves too little room.
std::string gantt_text(const Timeline& timeline, int chunks, const GanttOptions& options = {});

// Work a rank does beside its actions (a checkpoint's snapshot, its write, a wait for it), in the timeline's
// seconds; `kind` picks the colour and the legend's text among SvgOptions::side_kinds.
struct SideSpan {
  int kind = 0;
  std::string label;  // its tooltip
  double start = 0, end = 0;
};

struct SvgOptions {
  std::string title;    // drawn on top when not empty
  double width = 1100;  // pixels
  // Per rank, work beside its actions, drawn in a lane of its own under its row (none: no lanes; the time axis
  // reaches the last span's end); side_kinds names each kind for the legend.
  std::vector<std::vector<SideSpan>> side;
  std::vector<std::string> side_kinds;
};

// Ranks as rows, F/B/I/W/S in distinct colours (higher chunks lighter), tokens on boxes where they fit,
// idle time hatched, each rank's side lane under its row, a time axis and a legend.
std::string timeline_svg(const Timeline& timeline, int chunks, const SvgOptions& options = {});

}  // namespace kpipe::schedule
