// The exit-code table is the one every program's --help prints, and docs/user-guide.md's "Exit codes" table
// says the same, row for row, so that the two cannot drift apart.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kpipe/core/exit_codes.hpp"

namespace kpipe {
namespace {

struct GuideRow {
  std::string code, programs, meaning;
};

std::string trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(' '), last = text.find_last_not_of(' ');
  return first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
}

// The rows of the table under "## Exit codes" (its header and rule left out).
std::vector<GuideRow> guide_rows() {
  std::ifstream in(std::string(KPIPE_SOURCE_DIR) + "/docs/user-guide.md");
  EXPECT_TRUE(in.good()) << "docs/user-guide.md not found under " << KPIPE_SOURCE_DIR;
  std::vector<GuideRow> rows;
  bool in_section = false;
  int table_lines = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Exit codes";
    if (!in_section || line.rfind("|", 0) != 0) continue;
    if (++table_lines <= 2) continue;  // the header and its rule
    std::vector<std::string> cells;
    std::stringstream cells_text(line.substr(1, line.size() - 2));  // the cells between the outer bars
    for (std::string cell; std::getline(cells_text, cell, '|');) cells.push_back(trimmed(cell));
    EXPECT_EQ(cells.size(), 3u) << line;
    if (cells.size() == 3) rows.push_back({cells[0], cells[1], cells[2]});
  }
  return rows;
}

TEST(ExitCodes, TheUserGuideListsTheTableRowForRow) {
  const auto guide = guide_rows();
  const auto& table = exit_code_table();
  ASSERT_EQ(guide.size(), table.size()) << "docs/user-guide.md's exit-code table and core/exit_codes.cpp's differ";
  for (std::size_t k = 0; k < table.size(); ++k) {
    EXPECT_EQ(guide[k].code, std::to_string(table[k].code)) << "row " << k + 1;
    EXPECT_EQ(guide[k].programs, programs_text(table[k].programs)) << "row " << k + 1;
    EXPECT_EQ(guide[k].meaning, std::string(table[k].meaning)) << "row " << k + 1;
  }
}

TEST(ExitCodes, EveryCodeTheProgramsReturnIsInTheTable) {
  std::set<int> listed;
  for (const auto& row : exit_code_table()) listed.insert(row.code);
  std::set<int> codes;
  for (const ExitCode code : every_exit_code) {
    codes.insert(exit_status(code));
    EXPECT_EQ(listed.count(exit_status(code)), 1u) << exit_status(code);
  }
  EXPECT_EQ(listed, codes) << "the table has a row for a code that is no ExitCode";
}

TEST(ExitCodes, EachProgramsHelpListsItsRowsOnly) {
  const std::string eval = exit_codes_help(ProgramName::eval);
  EXPECT_EQ(eval.rfind("Exit codes:", 0), 0u);
  for (const char* line : {"\n  0    done", "\n  1    failure", "\n  2    bad input", "\n  3    a rank stopped"})
    EXPECT_NE(eval.find(line), std::string::npos) << line << " missing from\n" << eval;
  EXPECT_EQ(eval.find("\n  4 "), std::string::npos) << eval;
  const std::string train = exit_codes_help(ProgramName::train);
  EXPECT_NE(train.find("\n  143  the same after SIGTERM"), std::string::npos) << train;
  EXPECT_EQ(train.find("checkpoints differ"), std::string::npos) << train;
  for (std::size_t start = 0, end; start < train.size(); start = end + 1) {  // lines fit a terminal
    end = train.find('\n', start);
    if (end == std::string::npos) end = train.size();
    EXPECT_LE(end - start, 110u) << train.substr(start, end - start);
  }
}

TEST(ExitCodes, AFailureIsOneButForKpipeInspectWhoseOneSaysCheckpointsDiffer) {
  for (const ProgramName p : {ProgramName::train, ProgramName::eval, ProgramName::generate, ProgramName::prepare,
                              ProgramName::sim})
    EXPECT_EQ(failure_code(p), ExitCode::failure);
  EXPECT_EQ(failure_code(ProgramName::inspect), ExitCode::bad_input);  // as diff(1)'s trouble
  // Each program's failure code is in its help with a row that says so.
  for (const ProgramName p : {ProgramName::prepare, ProgramName::inspect}) {
    const std::string help = exit_codes_help(p), code = std::to_string(exit_status(failure_code(p)));
    EXPECT_NE(help.find("\n  " + code + std::string(5 - code.size(), ' ')), std::string::npos) << help;
    EXPECT_NE(help.find("failure"), std::string::npos) << help;
  }
}

TEST(ExitCodes, KpipePreparesRowsSpeakOfNoRanks) {
  const std::string prepare = exit_codes_help(ProgramName::prepare);
  EXPECT_EQ(prepare.find("rank"), std::string::npos) << prepare;
  EXPECT_EQ(prepare.find("chunk of the token file"), std::string::npos) << prepare;
}

}  // namespace
}  // namespace kpipe
