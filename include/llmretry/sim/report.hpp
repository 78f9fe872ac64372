#ifndef LLMRETRY_SIM_REPORT_HPP
#define LLMRETRY_SIM_REPORT_HPP

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../decision.hpp"
#include "../version.hpp"
#include "fleet.hpp"
#include "hedging.hpp"
#include "hosts.hpp"
#include "pacing.hpp"
#include "simulation.hpp"

/// Ways to show a simulation's RunResult: a table for people, CSV for tools, an SVG timeline for browsers.

LLMRETRY_BEGIN_NAMESPACE
namespace detail {

/// Returns how many terminal columns UTF-8 `text` takes (one per code point).
[[nodiscard]] inline std::size_t display_width(const std::string& text) noexcept {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

/// Returns `text` followed by spaces up to `width` columns.
[[nodiscard]] inline std::string pad(const std::string& text, std::size_t width) {
  const std::size_t used = display_width(text);
  return used >= width ? text : text + std::string(width - used, ' ');
}

/// Writes `rows` as columns aligned on their widest cell, two spaces apart.
inline void write_columns(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (std::size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], display_width(row[c]));
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) line += c + 1 < row.size() ? pad(row[c], widths[c] + 2) : row[c];
    out << line << '\n';
  }
}

/// Returns the mark of an attempt in the table: ✓ served, ✗ 429, ✗409, ✗503, ⌛ timeout.
[[nodiscard]] inline std::string mark(const sim::Attempt& attempt) {
  switch (attempt.outcome) {
    case sim::Outcome::served: return "✓";
    case sim::Outcome::timeout: return "⌛";
    case sim::Outcome::refused:
    case sim::Outcome::server_error: return attempt.status == 429 ? "✗" : "✗" + std::to_string(attempt.status);
  }
  return "?";
}

/// Returns a tick step of 1, 2 or 5 times a power of ten (ms) giving at most about 10 ticks over `span`.
[[nodiscard]] inline std::int64_t tick_step(std::int64_t span_ms) noexcept {
  std::int64_t step = 1;
  for (;;) {
    for (const std::int64_t m : {1, 2, 5})
      if (span_ms / (step * m) <= 10) return step * m;
    step *= 10;
  }
}

/// Returns `text` with &, <, > and " escaped for XML.
[[nodiscard]] inline std::string xml_escape(const std::string& text) {
  std::string escaped;
  for (const char c : text) {
    switch (c) {
      case '&': escaped += "&amp;"; break;
      case '<': escaped += "&lt;"; break;
      case '>': escaped += "&gt;"; break;
      case '"': escaped += "&quot;"; break;
      default: escaped += c;
    }
  }
  return escaped;
}

}  // namespace detail
LLMRETRY_END_NAMESPACE

LLMRETRY_BEGIN_NAMESPACE
namespace sim {

/// Returns a duration in seconds, as short as exact: 3500 ms gives "3.5", 511 ms "0.511", 0 "0".
[[nodiscard]] inline std::string seconds(std::chrono::milliseconds duration) {
  const auto ms = duration.count();
  std::string text = std::to_string((ms < 0 ? -ms : ms) / 1000);
  if (ms < 0) text.insert(0, 1, '-');  // not "-" + ...: GCC 12 at -O3 in C++20 warns (-Wrestrict) falsely
  auto fraction = (ms < 0 ? -ms : ms) % 1000;
  if (fraction != 0) {
    std::string digits = std::to_string(fraction);
    digits.insert(0, 3 - digits.size(), '0');
    while (digits.back() == '0') digits.pop_back();
    text += '.' + digits;
  }
  return text;
}

/// Writes one row per client: attempt times with their marks (✓ served, ✗ 429, ✗NNN another status,
/// ⌛ timeout), the waits and their total, and the result.
inline void write_table(std::ostream& out, const RunResult& result) {
  std::vector<std::vector<std::string>> rows{{"client", "attempts at (s)", "waits (s)", "result"}};
  for (std::size_t i = 0; i < result.clients.size(); ++i) {
    const ClientResult& client = result.clients[i];
    std::string attempts, waits;
    for (std::size_t a = 0; a < client.attempts.size(); ++a) {
      const Attempt& attempt = client.attempts[a];
      attempts += (a == 0 ? "" : ", ") + seconds(attempt.sent) + ' ' + detail::mark(attempt);
      if (a + 1 < client.attempts.size()) waits += (a == 0 ? "" : " + ") + seconds(attempt.wait);
    }
    if (client.attempts.size() < 2) waits = "-";
    if (client.attempts.size() > 2) waits += " = " + seconds(client.waited);
    const std::string outcome =
        client.served ? "served at " + seconds(client.finished) + " s"
                      : "gave up at " + seconds(client.finished) + " s (" + to_string(*client.gave_up) + ")";
    rows.push_back({std::to_string(i + 1), attempts, waits, outcome});
  }
  detail::write_columns(out, rows);
}

/// Writes one row per admission mode of a paced workload: requests, 429s (and their share), give-ups,
/// makespan and its ratio to the capacity bound, tokens reserved and used, and the p95 wait before a
/// call's first attempt.
inline void write_paced_table(std::ostream& out, const std::vector<std::pair<std::string, PacedTotals>>& runs) {
  std::vector<std::vector<std::string>> rows{{"admission", "requests", "429s", "gave up", "makespan (s)", "/ bound",
                                              "tokens reserved", "tokens used", "p95 queue wait (s)"}};
  for (const auto& [name, t] : runs) {
    const auto ratio = [](std::int64_t part, std::int64_t whole, int decimals) {
      std::ostringstream text;
      text.setf(std::ios::fixed);
      text.precision(decimals);
      text << (whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole));
      return text.str();
    };
    rows.push_back({name, std::to_string(t.requests),
                    std::to_string(t.refused) + " (" + ratio(t.refused * 100, t.requests, 1) + " %)",
                    std::to_string(t.gave_up), seconds(t.makespan), ratio(t.makespan.count(), t.bound.count(), 2),
                    t.tokens_reserved == 0 ? "-" : std::to_string(t.tokens_reserved), std::to_string(t.tokens_used),
                    seconds(t.p95_queue_wait)});
  }
  detail::write_columns(out, rows);
}

/// Writes a comparison of fleets of hosts: one row per way of pacing, with the requests, the 429s, the
/// makespan against the bound, the exchanges with the store (in all, and per second: the peak and the mean),
/// and the spread between hosts (when the first and the last finished; the fewest and most requests).
inline void write_hosts_table(std::ostream& out, const std::vector<std::pair<std::string, HostsTotals>>& runs) {
  std::vector<std::vector<std::string>> rows{{"pacing", "requests", "429s", "gave up", "makespan (s)", "/ bound",
                                              "store exchanges", "per s (peak / mean)", "hosts done (s)",
                                              "requests per host"}};
  const auto fixed = [](double value, int decimals) {
    std::ostringstream text;
    text.setf(std::ios::fixed);
    text.precision(decimals);
    text << value;
    return text.str();
  };
  const auto share = [&](std::int64_t part, std::int64_t whole, int decimals) {
    return fixed(whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole), decimals);
  };
  for (const auto& [name, t] : runs) {
    const auto by_makespan = std::minmax_element(t.by_host.begin(), t.by_host.end(),
                                                 [](const auto& a, const auto& b) { return a.makespan < b.makespan; });
    const auto by_requests = std::minmax_element(t.by_host.begin(), t.by_host.end(),
                                                 [](const auto& a, const auto& b) { return a.requests < b.requests; });
    const bool any = !t.by_host.empty();
    rows.push_back(
        {name, std::to_string(t.all.requests),
         std::to_string(t.all.refused) + " (" + share(t.all.refused * 100, t.all.requests, 1) + " %)",
         std::to_string(t.all.gave_up), seconds(t.all.makespan), share(t.all.makespan.count(), t.all.bound.count(), 2),
         t.exchanges == 0 ? "-" : std::to_string(t.exchanges),
         t.exchanges == 0
             ? "-"
             : std::to_string(t.peak_exchanges_per_second) + " / " + fixed(t.mean_exchanges_per_second(), 1),
         any ? seconds(by_makespan.first->makespan) + " - " + seconds(by_makespan.second->makespan) : "-",
         any ? std::to_string(by_requests.first->requests) + " - " + std::to_string(by_requests.second->requests)
             : "-"});
  }
  detail::write_columns(out, rows);
}

/// Writes a fleet comparison: one row per set of mechanisms, with the calls served by each deployment,
/// the give-ups by reason, the requests to the primary and the retry amplification there.
inline void write_fleet_table(std::ostream& out, const std::vector<std::pair<std::string, FleetTotals>>& runs) {
  std::vector<std::vector<std::string>> rows{{"mechanisms", "served", "by primary", "by fallback", "gave up (reason)",
                                              "primary requests", "amplification", "fallback requests"}};
  for (const auto& [name, t] : runs) {
    std::string gave_up;
    for (const auto& [reason, count] : t.gave_up)
      gave_up += (gave_up.empty() ? "" : ", ") + std::to_string(count) + " " + reason;
    std::ostringstream amplification;
    amplification.setf(std::ios::fixed);
    amplification.precision(2);
    amplification << t.primary_amplification();
    rows.push_back({name, std::to_string(t.served()), std::to_string(t.served_by[0]), std::to_string(t.served_by[1]),
                    gave_up.empty() ? "0" : gave_up, std::to_string(t.attempts[0]), amplification.str(),
                    std::to_string(t.attempts[1])});
  }
  detail::write_columns(out, rows);
}

/// Writes the runs of a HedgingScenario without and with hedging: the requests, the extra share, the hedges
/// and how many won, and the percentiles of the calls' durations in seconds.
inline void write_hedging_table(std::ostream& out, const HedgingTotals& without, const HedgingTotals& with) {
  std::vector<std::vector<std::string>> rows{
      {"run", "requests", "extra", "hedges", "hedges won", "P50", "P95", "P99", "P99.9", "max"}};
  for (const auto& [name, t] : {std::pair<std::string, HedgingTotals>{"without hedging", without},
                                std::pair<std::string, HedgingTotals>{"with hedging", with}}) {
    std::ostringstream extra;
    extra.setf(std::ios::fixed);
    extra.precision(1);
    extra << (t.calls == 0 ? 0.0 : 100.0 * static_cast<double>(t.requests - t.calls) / static_cast<double>(t.calls))
          << " %";
    rows.push_back({name, std::to_string(t.requests), extra.str(), std::to_string(t.hedges),
                    std::to_string(t.hedge_wins), seconds(t.p50) + " s", seconds(t.p95) + " s", seconds(t.p99) + " s",
                    seconds(t.p999) + " s", seconds(t.max) + " s"});
  }
  detail::write_columns(out, rows);
}

/// Writes the totals in two lines: requests and their outcomes, then times.
inline void write_totals(std::ostream& out, const Totals& totals) {
  out << totals.requests << " requests, " << totals.refused << " refused (" << totals.refusal_status << "), "
      << totals.other_failures << " other failures; " << totals.served << " of " << totals.served + totals.gave_up
      << " served, " << totals.gave_up << " gave up\n"
      << "last finish " << seconds(totals.makespan) << " s; completion p50 " << seconds(totals.p50) << " s, p95 "
      << seconds(totals.p95) << " s, p99 " << seconds(totals.p99) << " s; total waiting " << seconds(totals.waited)
      << " s; largest group of retries at one instant: " << totals.largest_retry_group;
  if (totals.largest_retry_group > 0) out << " (at " << seconds(totals.largest_retry_group_at) << " s)";
  out << '\n';
}

/// Writes one CSV row per attempt, after the header
/// `client,attempt,sent_ms,answered_ms,outcome,status,wait_ms` (client numbered from 1).
inline void write_csv(std::ostream& out, const RunResult& result) {
  out << "client,attempt,sent_ms,answered_ms,outcome,status,wait_ms\n";
  for (std::size_t i = 0; i < result.clients.size(); ++i)
    for (const Attempt& a : result.clients[i].attempts)
      out << i + 1 << ',' << a.number << ',' << a.sent.count() << ',' << a.answered.count() << ','
          << to_string(a.outcome) << ',' << a.status << ',' << a.wait.count() << '\n';
}

/// Writes the timeline as a self-contained SVG document: one lane (`<g class="lane">`) per client, with
/// each attempt (green served, red refused, orange 503 or timeout; a bar while in flight), each wait
/// (grey) and a time axis in seconds. `title` is shown at the top. The axis runs from 0 to the larger
/// of `axis_end` and the run's last finish: give runs that are compared the same `axis_end` to draw
/// them on one scale.
inline void write_svg(std::ostream& out, const RunResult& result, const std::string& title, Time axis_end = Time{0}) {
  const std::int64_t lanes = static_cast<std::int64_t>(result.clients.size());
  const std::int64_t lane = std::clamp<std::int64_t>(600 / std::max<std::int64_t>(lanes, 1), 2, 24);
  const std::int64_t left = 80, top = 56, plot = 860, width = left + plot + 30;
  const std::int64_t height = top + lanes * lane + 40;
  const std::int64_t span = std::max({result.totals.makespan.count(), axis_end.count(), std::int64_t{1}});
  const auto x = [&](Time t) {
    return static_cast<double>(left) +
           static_cast<double>(plot) * static_cast<double>(t.count()) / static_cast<double>(span);
  };
  const auto rect = [&](double x0, double x1, std::int64_t y, std::int64_t h, const char* cls) {
    out << "<rect class=\"" << cls << "\" x=\"" << x0 << "\" y=\"" << y << "\" width=\"" << std::max(x1 - x0, 1.5)
        << "\" height=\"" << h << "\"/>";
  };
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << ' ' << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<style>.served{fill:#2e9d46}.refused{fill:#d62f2f}.failed{fill:#f08c00}.wait{fill:#c9ced6}"
         ".flight{fill:#7fb2e5}.axis{stroke:#888;stroke-width:1}text{fill:#222}</style>\n"
      << "<rect x=\"0\" y=\"0\" width=\"" << width << "\" height=\"" << height << "\" fill=\"#fff\"/>\n"
      << "<text x=\"" << left << "\" y=\"18\" font-size=\"14\" font-weight=\"bold\">" << detail::xml_escape(title)
      << "</text>\n";
  const std::string refused = "refused (" + std::to_string(result.totals.refusal_status) + ")";
  const char* legend[][2] = {{"served", "served"},
                             {"refused", refused.c_str()},
                             {"failed", "503 / timeout"},
                             {"flight", "in flight"},
                             {"wait", "waiting"}};
  std::int64_t lx = left;
  for (const auto& item : legend) {
    out << "<rect class=\"" << item[0] << "\" x=\"" << lx << "\" y=\"28\" width=\"10\" height=\"10\"/><text x=\""
        << lx + 14 << "\" y=\"37\">" << item[1] << "</text>";
    lx += 130;
  }
  out << '\n';
  const std::int64_t bar = std::max<std::int64_t>(lane - 4, 1);
  for (std::int64_t i = 0; i < lanes; ++i) {
    const ClientResult& client = result.clients[static_cast<std::size_t>(i)];
    const std::int64_t y = top + i * lane;
    out << "<g class=\"lane\" id=\"client-" << i + 1 << "\"><title>client " << i + 1 << ": "
        << (client.served ? "served at " : "gave up at ") << seconds(client.finished) << " s</title>";
    if (lane >= 10)
      out << "<text x=\"" << left - 8 << "\" y=\"" << y + lane - 7 << "\" text-anchor=\"end\">client " << i + 1
          << "</text>";
    for (const Attempt& a : client.attempts) {
      if (a.wait > std::chrono::milliseconds::zero())
        rect(x(a.answered), x(a.answered + a.wait), y + 2 + bar / 4, (bar + 1) / 2, "wait");
      if (a.answered > a.sent) rect(x(a.sent), x(a.answered), y + 2, bar, "flight");
      const char* cls = a.outcome == Outcome::served ? "served" : a.outcome == Outcome::refused ? "refused" : "failed";
      rect(x(a.sent) - 1.5, x(a.sent) + 1.5, y + 2, bar, cls);
    }
    out << "</g>\n";
  }
  const std::int64_t axis_y = top + lanes * lane + 6;
  out << "<line class=\"axis\" x1=\"" << left << "\" y1=\"" << axis_y << "\" x2=\"" << left + plot << "\" y2=\""
      << axis_y << "\"/>";
  const std::int64_t step = detail::tick_step(span);
  for (std::int64_t t = 0; t <= span; t += step)
    out << "<line class=\"axis\" x1=\"" << x(Time{t}) << "\" y1=\"" << axis_y << "\" x2=\"" << x(Time{t}) << "\" y2=\""
        << axis_y + 4 << "\"/><text x=\"" << x(Time{t}) << "\" y=\"" << axis_y + 18 << "\" text-anchor=\"middle\">"
        << seconds(Time{t}) << " s</text>";
  out << "\n</svg>\n";
}

}  // namespace sim
LLMRETRY_END_NAMESPACE

#endif  // LLMRETRY_SIM_REPORT_HPP
