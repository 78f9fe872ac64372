#include <llmretry/sim/report.hpp>
#include <llmretry/sim/scenarios.hpp>

#include <chrono>
#include <sstream>
#include <string>

#include "llmretry_catch.hpp"

using namespace std::chrono_literals;
using llmretry::Jitter;
using llmretry::sim::seconds;
using llmretry::sim::simulate;
namespace scenarios = llmretry::sim::scenarios;

TEST_CASE("seconds() is as short as exact") {
  CHECK(seconds(0ms) == "0");
  CHECK(seconds(3500ms) == "3.5");
  CHECK(seconds(511ms) == "0.511");
  CHECK(seconds(1050ms) == "1.05");
  CHECK(seconds(30000ms) == "30");
}

TEST_CASE("the explorer's table, exactly") {
  std::ostringstream out;
  llmretry::sim::write_table(out, simulate(scenarios::explorer(Jitter::none)));
  const std::string expected =
      "client  attempts at (s)           waits (s)          result\n"
      "1       0 ✓                       -                  served at 0 s\n"
      "2       0 ✗, 0.5 ✓                0.5                served at 0.5 s\n"
      "3       0 ✗, 0.5 ✗, 1.5 ✓         0.5 + 1 = 1.5      served at 1.5 s\n"
      "4       0 ✗, 0.5 ✗, 1.5 ✗, 3.5 ✓  0.5 + 1 + 2 = 3.5  served at 3.5 s\n";
  CHECK(out.str() == expected);
}

TEST_CASE("the totals, in two lines") {
  std::ostringstream out;
  llmretry::sim::write_totals(out, simulate(scenarios::explorer(Jitter::none)).totals);
  CHECK(out.str() ==
        "10 requests, 6 refused (429), 0 other failures; 4 of 4 served, 0 gave up\n"
        "last finish 3.5 s; completion p50 0.5 s, p95 3.5 s, p99 3.5 s; total waiting 5.5 s; "
        "largest group of retries at one instant: 3 (at 0.5 s)\n");
}

TEST_CASE("the totals and the SVG legend name the status that refusals were answered with") {
  const auto conflicts = simulate(scenarios::brooker_occ(4, Jitter::none));
  std::ostringstream totals, svg;
  llmretry::sim::write_totals(totals, conflicts.totals);
  llmretry::sim::write_svg(svg, conflicts, "brooker");
  CHECK(totals.str().find(" refused (409), ") != std::string::npos);
  CHECK(svg.str().find(">refused (409)</text>") != std::string::npos);
  CHECK(svg.str().find("429") == std::string::npos);
}

TEST_CASE("a give-up shows its reason") {
  auto s = scenarios::explorer(Jitter::none);
  s.policy.max_attempts = 3;
  std::ostringstream out;
  llmretry::sim::write_table(out, simulate(s));
  CHECK(out.str().find("gave up at 1.5 s (attempts_exhausted)") != std::string::npos);
}

TEST_CASE("CSV: one row per attempt, with the status answered (200 when served)") {
  std::ostringstream out;
  llmretry::sim::write_csv(out, simulate(scenarios::explorer(Jitter::none)));
  const std::string csv = out.str();
  CHECK(
      csv.rfind(
          "client,attempt,sent_ms,answered_ms,outcome,status,wait_ms\n1,1,0,0,served,200,0\n2,1,0,0,refused,429,500\n",
          0) == 0);
  CHECK(csv.find("4,4,3500,3500,served,200,0\n") != std::string::npos);
  std::size_t rows = 0;
  for (const char c : csv) rows += c == '\n' ? 1 : 0;
  CHECK(rows == 11);  // the header and 10 requests
}

TEST_CASE("SVG: the time axis reaches the given end, so that compared runs share one scale") {
  const auto run = simulate(scenarios::explorer(Jitter::none));  // last finish 3.5 s
  std::ostringstream own, shared;
  llmretry::sim::write_svg(own, run, "own scale");
  llmretry::sim::write_svg(shared, run, "shared scale", std::chrono::milliseconds{10000});
  CHECK(own.str().find(">3 s</text>") != std::string::npos);
  CHECK(own.str().find(">10 s</text>") == std::string::npos);
  CHECK(shared.str().find(">10 s</text>") != std::string::npos);
  std::ostringstream shorter;  // an end before the last finish does not cut the run
  llmretry::sim::write_svg(shorter, run, "own scale", std::chrono::milliseconds{1000});
  CHECK(shorter.str() == own.str());
}

TEST_CASE("SVG: one lane per client, the title escaped") {
  std::ostringstream out;
  llmretry::sim::write_svg(out, simulate(scenarios::explorer(Jitter::none)), "explorer <no jitter> & co");
  const std::string svg = out.str();
  std::size_t lanes = 0;
  for (auto at = svg.find("<g class=\"lane\""); at != std::string::npos; at = svg.find("<g class=\"lane\"", at + 1))
    ++lanes;
  CHECK(lanes == 4);
  CHECK(svg.find("explorer &lt;no jitter&gt; &amp; co") != std::string::npos);
  CHECK(svg.rfind("<?xml", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
}

TEST_CASE("the hosts' table: exchanges per second, and the spread between hosts") {
  llmretry::sim::HostsTotals shared;
  shared.all.requests = 200;
  shared.all.refused = 3;
  shared.all.makespan = 10s;
  shared.all.bound = 8s;
  shared.exchanges = 400;
  shared.peak_exchanges_per_second = 90;
  shared.by_host.resize(2);
  shared.by_host[0].makespan = 9500ms;
  shared.by_host[0].requests = 90;
  shared.by_host[1].makespan = 10s;
  shared.by_host[1].requests = 110;
  llmretry::sim::HostsTotals alone = shared;
  alone.exchanges = 0;
  std::ostringstream out;
  llmretry::sim::write_hosts_table(out, {{"shared", shared}, {"alone", alone}});
  const std::string text = out.str();
  CHECK_THAT(text, llmretry_catch::contains("3 (1.5 %)"));
  CHECK_THAT(text, llmretry_catch::contains("1.25"));
  CHECK_THAT(text, llmretry_catch::contains("90 / 40.0"));
  CHECK_THAT(text, llmretry_catch::contains("9.5 - 10"));
  CHECK_THAT(text, llmretry_catch::contains("90 - 110"));
  CHECK(text.find("alone   200") != std::string::npos);
}
