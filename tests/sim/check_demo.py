"""Checks the llmretry-sim demo: its SVG timeline is well-formed XML (python3's xml module) with one lane
per client, its CSV has one row per request, and a bad option exits with status 2 naming the option.

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
    with open(table, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10 and sum(r["outcome"] == "refused" for r in rows) == 6, rows

    for clients in (1, 37, 300):
        result = run(tool, "--clients", str(clients), "--jitter", "full", "--seeds", "1", "--svg", svg)
        assert result.returncode == 0, result.stderr
        check_svg(svg, clients)

    for args, needle in ((["--clients", "0"], "--clients"), (["--jitter", "some"], "--jitter"),
                         (["--base", "fast"], "--base"), (["--frobnicate", "1"], "--frobnicate"),
                         (["--error-rate", "2"], "--error-rate"), (["--clients"], "--clients"),
                         (["--base", "2s", "--cap", "1s"], "cap")):
        result = run(tool, *args)
        assert result.returncode == 2, (args, result.returncode)
        assert needle in result.stderr, (args, result.stderr)
    print("llmretry-sim: SVG, CSV and errors as expected")


if __name__ == "__main__":
    main()
