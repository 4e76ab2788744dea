// Rendering: the text Gantt chart of a small schedule, character by character, and the SVG's content.
#include <gtest/gtest.h>

#include "kpipe/schedule/generate.hpp"
#include "kpipe/schedule/render.hpp"

namespace kpipe::schedule {
namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(Render, GanttOfOneFOneB) {
  // f = 1, b = 2: 3 columns per unit; rank 0 idles 2 units before B0 and 1 before B1.
  const SimResult sim = simulate(one_f_one_b(2, 2));
  EXPECT_EQ(gantt_text(sim.timeline, 1),
            "        0              5\n"
            "rank 0 |F0 F1 ......B0    ...B1    |\n"
            "rank 1 |...F0 B0    F1 B1    ......|\n");
}

TEST(Render, GanttShortensLabelsToFitTheWidth) {
  const SimResult sim = simulate(gpipe(2, 12));
  const std::string wide = gantt_text(sim.timeline, 1, GanttOptions{0});
  EXPECT_NE(wide.find("F10 F11 "), std::string::npos);
  const std::string narrow = gantt_text(sim.timeline, 1, GanttOptions{40});
  // 39 time units in at most 40 columns: one column per unit, so forwards are their letter only.
  EXPECT_NE(narrow.find("rank 0 |FFFFFFFFFFFF...B0B1"), std::string::npos) << narrow;
  EXPECT_NE(narrow.find("rank 1 |.FFFFFFFFFFFFB0B1"), std::string::npos) << narrow;
  for (const char* line_start : {"rank 0 |", "rank 1 |"}) {
    const auto at = narrow.find(line_start);
    ASSERT_NE(at, std::string::npos);
    EXPECT_EQ(narrow.find('|', at + 8) - (at + 8), 39u);
  }
}

TEST(Render, GanttShowsChunks) {
  const SimResult sim = simulate(interleaved(2, 2, 2));
  const std::string gantt = gantt_text(sim.timeline, 2, GanttOptions{0});
  EXPECT_NE(gantt.find("F0.0 F1.0 F0.1 F1.1"), std::string::npos) << gantt;
}

TEST(Render, SvgDrawsEveryActionWithLegendAndAxis) {
  const SimResult sim = simulate(split_backward(one_f_one_b(3, 4)));
  SvgOptions options;
  options.title = "1f1b <split> & more";
  const std::string svg = timeline_svg(sim.timeline, 1, options);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(count(svg, "<title>"), 3u * 3 * 4);  // F, I, W per micro-batch and rank; S takes no time
  EXPECT_NE(svg.find("1f1b &lt;split&gt; &amp; more"), std::string::npos);
  for (const char* legend : {"F forward", "I input gradient", "W weight gradient", "idle", ">time<", ">rank 2<"})
    EXPECT_NE(svg.find(legend), std::string::npos) << legend;
  EXPECT_EQ(svg.find("B backward"), std::string::npos);  // only the kinds present
  EXPECT_NE(svg.find(">I3<"), std::string::npos);          // labels on boxes
}

}  // namespace
}  // namespace kpipe::schedule
