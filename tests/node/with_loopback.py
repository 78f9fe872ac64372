#!/usr/bin/env python3
"""Runs a Node.js client against llmretry-loopback: starts the provider, passes its base URL to
`node SCRIPT URL`, stops the provider. Usage: with_loopback.py LOOPBACK NODE SCRIPT.
Exits with the client's status; 1 when the provider did not start."""
import signal
import subprocess
import sys


def main() -> int:
    loopback, node, script = sys.argv[1:4]
    provider = subprocess.Popen([loopback], stdout=subprocess.PIPE, text=True)
    try:
        url = provider.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            print(f"llmretry-loopback did not print its base URL (got {url!r})", file=sys.stderr)
            return 1
        return subprocess.run([node, script, url], timeout=120).returncode
    finally:
        provider.send_signal(signal.SIGTERM)
        provider.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
