"""Checks the llmretry-sim demo: its SVG timeline is well-formed XML (python3's xml module) with one lane
per client, compared runs share one time scale, its CSV has one row per request with the status answered,
--help exits 0, --option=value works, and a bad option or an unwritable output exits with status 2
naming the option.

usage: check_demo.py LLMRETRY_SIM WORK_DIR
"""
import csv
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

SVG_NS = "{http://www.w3.org/2000/svg}"


def run(tool, *args):
    return subprocess.run([tool, *args], capture_output=True, text=True, encoding="utf-8")


def check_svg(path, clients):
    root = ET.parse(path).getroot()  # raises on malformed XML
    assert root.tag == SVG_NS + "svg", root.tag
    lanes = [g for g in root.iter(SVG_NS + "g") if g.get("class") == "lane"]
    assert len(lanes) == clients, f"{path}: {len(lanes)} lanes for {clients} clients"
    ids = [g.get("id") for g in lanes]
    assert ids == [f"client-{i}" for i in range(1, clients + 1)], ids
    for lane in lanes:
        assert lane.find(SVG_NS + "title") is not None and len(lane.findall(SVG_NS + "rect")) >= 1


def axis_labels(path):
    """Returns the labels of the time axis of an SVG timeline ("0 s", "0.5 s", ...)."""
    root = ET.parse(path).getroot()
    return [t.text for t in root.iter(SVG_NS + "text") if t.get("text-anchor") == "middle"]


def main():
    tool, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    svg, table = os.path.join(work, "demo.svg"), os.path.join(work, "demo.csv")

    # The default demo writes both runs: the explorer without jitter, then "-2" with it.
    result = run(tool, "--svg", svg, "--csv", table)
    assert result.returncode == 0, result.stderr
    assert "0 ✗, 0.5 ✗, 1.5 ✗, 3.5 ✓" in result.stdout, result.stdout
    check_svg(svg, 4)
    check_svg(os.path.join(work, "demo-2.svg"), 4)
    # The run with jitter finishes earlier, but the comparison is drawn on one scale: 0 to 3.5 s.
    labels = axis_labels(svg)
    assert labels[-1] == "3.5 s" and labels == axis_labels(os.path.join(work, "demo-2.svg")), labels
    with open(table, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10 and sum(r["outcome"] == "refused" for r in rows) == 6, rows
    assert all(r["status"] == ("200" if r["outcome"] == "served" else "429") for r in rows), rows

    result = run(tool, "--help")
    assert result.returncode == 0 and "usage: llmretry-sim" in result.stdout, result
    result = run(tool, "--scenario=brooker", "--clients=4", "--base=1m30s", "--cap=2m", "--seeds=1")
    assert result.returncode == 0, result.stderr
    assert "policy: base 90 s" in result.stdout and "refused (409)" in result.stdout, result.stdout

    for clients in (1, 37, 300):
        result = run(tool, "--clients", str(clients), "--jitter", "full", "--seeds", "1", "--svg", svg)
        assert result.returncode == 0, result.stderr
        check_svg(svg, clients)

    for args, needle in ((["--clients", "0"], "--clients"), (["--jitter", "some"], "--jitter"),
                         (["--base", "fast"], "--base"), (["--frobnicate", "1"], "--frobnicate"),
                         (["--error-rate", "2"], "--error-rate"), (["--clients"], "--clients"),
                         (["--base", "2s", "--cap", "1s"], "cap"), (["--bogus"], "'--bogus' is not an option"),
                         (["--bogus=1"], "'--bogus' is not an option"), (["--table=yes"], "--table"),
                         (["--svg", os.path.join(work, "missing", "x.svg")], "--svg"),
                         (["--csv=" + os.path.join(work, "missing", "x.csv")], "--csv")):
        result = run(tool, *args)
        assert result.returncode == 2, (args, result.returncode)
        assert needle in result.stderr, (args, result.stderr)
    print("llmretry-sim: SVG, CSV and errors as expected")


if __name__ == "__main__":
    main()
