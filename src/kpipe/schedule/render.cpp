#include "kpipe/schedule/render.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "kpipe/schedule/text.hpp"

namespace kpipe::schedule {

namespace {

bool drawn(const Span& span) { return !is_comm(span.action.op) && span.end > span.start; }

double timeline_end(const Timeline& timeline) {
  double end = 0;
  for (const auto& row : timeline)
    for (const auto& span : row) end = std::max(end, span.end);
  return end;
}

// A round tick spacing (1, 2, 5 times a power of ten) at least `least` long.
double tick_step(double least) {
  if (!(least > 0)) return 1;
  double power = std::pow(10.0, std::floor(std::log10(least)));
  for (;; power *= 10)
    for (double m : {1.0, 2.0, 5.0})
      if (m * power >= least) return m * power;
}

std::string tick_label(double t) { return fmt::format("{:g}", t); }

// The side lanes' colours, by kind: greys and an amber, apart from the actions' hues.
const char* side_colour(int kind) {
  constexpr const char* colours[] = {"#7f7f7f", "#c9c9c9", "#e0a030", "#4d4d4d"};
  return colours[std::size_t(kind) % (sizeof colours / sizeof colours[0])];
}

// The label of an action that fits in `room` characters: the token, then without its chunk, then the letter.
// With want_blank (text, where nothing else separates boxes) a label that leaves a blank is preferred.
std::string fitted_label(const Action& a, int chunks, int room, bool want_blank) {
  const std::string full = to_token(a, chunks), short_label = to_token(a, 1), letter = short_label.substr(0, 1);
  if (want_blank)
    for (const std::string& label : {full, short_label})
      if (int(label.size()) < room) return label;
  for (const std::string& label : {full, short_label, letter})
    if (int(label.size()) <= room) return label;
  return "";
}

// SVG colours.
struct Rgb {
  double r, g, b;
};

Rgb base_colour(Op op) {
  switch (op) {
    case Op::forward: return {0x3b, 0x75, 0xaf};          // blue
    case Op::backward: return {0x3a, 0x92, 0x3a};         // green
    case Op::backward_input: return {0xe0, 0x7b, 0x1a};   // orange
    case Op::backward_weight: return {0x8e, 0x5b, 0xa8};  // purple
    case Op::update: return {0xb8, 0x3a, 0x3a};           // red
    default: return {0x6b, 0x6b, 0x6b};                   // grey: the step
  }
}

// Higher chunks are lighter: chunk c of v is mixed with white by up to 55%.
Rgb shade(Op op, int chunk, int chunks) {
  const Rgb c = base_colour(op);
  const double t = chunks > 1 ? 0.55 * chunk / (chunks - 1) : 0.0;
  return {c.r + (255 - c.r) * t, c.g + (255 - c.g) * t, c.b + (255 - c.b) * t};
}

std::string hex(const Rgb& c) {
  return fmt::format("#{:02x}{:02x}{:02x}", int(std::lround(c.r)), int(std::lround(c.g)), int(std::lround(c.b)));
}

bool is_light(const Rgb& c) { return 0.299 * c.r + 0.587 * c.g + 0.114 * c.b > 150; }

std::string escape(const std::string& text) {
  std::string out;
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::forward: return "F forward";
    case Op::backward: return "B backward";
    case Op::backward_input: return "I input gradient";
    case Op::backward_weight: return "W weight gradient";
    case Op::step: return "S optimizer step";
    case Op::update: return "U weight update (new version)";
    default: return "";
  }
}

}  // namespace

std::string gantt_text(const Timeline& timeline, int chunks, const GanttOptions& options) {
  const double end = timeline_end(timeline);
  double shortest = 0;
  std::size_t longest_label = 1;
  for (const auto& row : timeline) {
    for (const auto& span : row) {
      if (!drawn(span)) continue;
      const double d = span.end - span.start;
      shortest = shortest == 0 ? d : std::min(shortest, d);
      longest_label = std::max(longest_label, to_token(span.action, chunks).size());
    }
  }
  const int ranks = int(timeline.size());
  const std::string last_rank = fmt::format("{}", std::max(ranks - 1, 0));
  const std::size_t prefix = 5 + last_rank.size() + 2;  // "rank " + number + " |"
  if (!(end > 0) || shortest == 0) return std::string(prefix, ' ') + "(no actions)\n";

  // Columns per time unit: the shortest action holds the longest label and a blank, within max_width.
  // Columns per time unit: the shortest action gets a whole number of columns (so that equal actions get
  // equal widths), enough for the longest label and a blank, or as many as max_width allows.
  double columns = double(longest_label + 1);
  if (options.max_width > 0 && end / shortest * columns > options.max_width)
    columns = std::max(std::floor(options.max_width * shortest / end), 1.0);
  double scale = columns / shortest;
  if (options.max_width > 0 && end * scale > options.max_width) scale = options.max_width / end;
  auto column = [&](double t) { return int(std::lround(t * scale)); };
  const int width = column(end);

  std::string axis(prefix + width + 8, ' ');
  const double step = tick_step(8.0 / scale);
  for (double t = 0; t <= end + 1e-9 * end; t += step) {
    const std::string label = tick_label(t);
    const std::size_t at = prefix + column(t);
    if (at + label.size() <= axis.size()) axis.replace(at, label.size(), label);
  }
  axis.erase(axis.find_last_not_of(' ') + 1);

  std::string out = axis + "\n";
  for (int r = 0; r < ranks; ++r) {
    std::string row(width, '.');
    for (const auto& span : timeline[r]) {
      if (!drawn(span)) continue;
      const int first = column(span.start), room = column(span.end) - first;
      if (room <= 0) continue;
      row.replace(first, room, std::string(room, ' '));
      const std::string label = fitted_label(span.action, chunks, room, true);
      row.replace(first, label.size(), label);
    }
    out += fmt::format("rank {:>{}} |{}|\n", r, last_rank.size(), row);
  }
  return out;
}

std::string timeline_svg(const Timeline& timeline, int chunks, const SvgOptions& options) {
  double end = std::max(timeline_end(timeline), 1e-12);
  for (const auto& lane : options.side)  // the step boundary's work after the last action, too
    for (const auto& span : lane) end = std::max(end, span.end);
  const int ranks = int(timeline.size());
  const double left = 64, right = 24, top = options.title.empty() ? 16 : 44, row_height = 26, row_gap = 6;
  const double lane_height = options.side.empty() ? 0 : 10, lane_gap = options.side.empty() ? 0 : 2;
  const double row_pitch = row_height + lane_gap + lane_height + row_gap;
  const double plot_width = std::max(options.width - left - right, 100.0);
  const double scale = plot_width / end;
  const double rows_bottom = top + ranks * row_pitch - row_gap;
  const double axis_y = rows_bottom + 8, legend_y = axis_y + 40;
  const double height = legend_y + 26;
  const double font = 11, char_width = 0.62 * font;

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} {1:.0f}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"{2}\">\n",
      left + plot_width + right, height, font);
  svg +=
      "<defs><pattern id=\"idle\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#f3f3f3\"/>"
      "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#d4d4d4\" stroke-width=\"2\"/></pattern></defs>\n";
  svg += fmt::format("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  if (!options.title.empty())
    svg += fmt::format("<text x=\"{}\" y=\"26\" font-size=\"15\" font-weight=\"bold\">{}</text>\n", left,
                       escape(options.title));

  // Rows: the idle background, then the actions on top.
  std::vector<bool> used(int(Op::update) + 1, false);
  bool boundaries = false;  // asynchronous schedules' step boundaries (S without a flush: no time)
  std::vector<bool> side_used(options.side_kinds.size(), false);
  for (int r = 0; r < ranks; ++r) {
    const double y = top + r * row_pitch;
    // The side lane: what the rank did beside its actions.
    for (const auto& span : r < int(options.side.size()) ? options.side[r] : std::vector<SideSpan>{}) {
      const double from = std::clamp(span.start, 0.0, end), to = std::clamp(span.end, 0.0, end);
      if (!(to > from) || span.kind < 0 || span.kind >= int(side_used.size())) continue;
      side_used[span.kind] = true;
      svg += fmt::format("<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"><title>{} rank {}: "
                         "{:g} to {:g}</title></rect>\n",
                         left + from * scale, y + row_height + lane_gap, std::max((to - from) * scale, 0.5),
                         lane_height, side_colour(span.kind), escape(span.label), r, span.start, span.end);
    }
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\" dominant-baseline=\"central\">rank {}</text>\n",
                       left - 8, y + row_height / 2, r);
    svg += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"url(#idle)\"/>\n", left, y,
                       plot_width, row_height);
    // Several S on a row: an asynchronous schedule's step boundaries, drawn as lines (they take no time).
    const auto steps = std::count_if(timeline[r].begin(), timeline[r].end(),
                                     [](const Span& span) { return span.action.op == Op::step; });
    for (const auto& span : timeline[r]) {
      if (steps > 1 && span.action.op == Op::step && span.end == span.start) {
        boundaries = true;
        const double x = left + span.start * scale;
        svg += fmt::format("<line x1=\"{0:.2f}\" y1=\"{1:.1f}\" x2=\"{0:.2f}\" y2=\"{2:.1f}\" stroke=\"#222\" "
                           "stroke-width=\"1.5\" stroke-dasharray=\"3,2\"><title>step boundary, rank {3}: {4:g}</title>"
                           "</line>\n",
                           x, y - 2, y + row_height + 2, r, span.start);
      }
      if (!drawn(span)) continue;
      const Action& a = span.action;
      used[int(a.op)] = true;
      const Rgb colour = shade(a.op, a.chunk, chunks);
      const double x = left + span.start * scale, w = (span.end - span.start) * scale;
      svg += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\" stroke=\"white\" "
          "stroke-width=\"{}\"><title>{} rank {}: {:g} to {:g}</title></rect>\n",
          x, y, w, row_height, hex(colour), w > 3 ? 1.0 : 0.3, escape(to_token(a, chunks)), r, span.start, span.end);
      const std::string label = fitted_label(a, chunks, int((w - 4) / char_width), false);
      if (!label.empty())
        svg += fmt::format(
            "<text x=\"{:.2f}\" y=\"{:.1f}\" text-anchor=\"middle\" dominant-baseline=\"central\" fill=\"{}\">{}</text>\n",
            x + w / 2, y + row_height / 2, is_light(colour) ? "#1a1a1a" : "white", escape(label));
    }
  }

  // Time axis.
  svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{:.2f}\" y2=\"{:.1f}\" stroke=\"#444\"/>\n", left, axis_y,
                     left + plot_width, axis_y);
  const double step = tick_step(60.0 / scale);
  for (double t = 0; t <= end * (1 + 1e-9); t += step) {
    const double x = left + t * scale;
    svg += fmt::format("<line x1=\"{0:.2f}\" y1=\"{1:.1f}\" x2=\"{0:.2f}\" y2=\"{2:.1f}\" stroke=\"#444\"/>\n", x,
                       axis_y, axis_y + 5);
    svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#333\">{}</text>\n", x,
                       axis_y + 17, tick_label(t));
  }
  svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.1f}\" text-anchor=\"end\" fill=\"#333\">time</text>\n",
                     left + plot_width, axis_y + 32);

  // Legend: the kinds present, idle, and how chunks are told apart.
  double x = left;
  auto legend_entry = [&](const std::string& fill, const std::string& text) {
    svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"14\" height=\"14\" fill=\"{}\" stroke=\"#999\" "
                       "stroke-width=\"0.5\"/>\n",
                       x, legend_y - 7, fill);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" dominant-baseline=\"central\">{}</text>\n", x + 20, legend_y,
                       escape(text));
    x += 20 + text.size() * char_width + 22;
  };
  for (Op op : {Op::forward, Op::backward, Op::backward_input, Op::backward_weight, Op::update, Op::step})
    if (used[int(op)]) legend_entry(hex(shade(op, 0, chunks)), op_name(op));
  if (boundaries) legend_entry("#222222", "step boundary (no flush)");
  for (std::size_t k = 0; k < side_used.size(); ++k)
    if (side_used[k]) legend_entry(side_colour(int(k)), options.side_kinds[k]);
  legend_entry("url(#idle)", "idle");
  if (chunks > 1) {
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" dominant-baseline=\"central\" fill=\"#333\">lighter: "
                       "higher chunk (F3.1 = micro-batch 3, chunk 1)</text>\n",
                       x, legend_y);
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace kpipe::schedule
