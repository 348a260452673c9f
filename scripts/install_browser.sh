#!/usr/bin/env bash
# The headless browser the dashboard's test drives (tests/syncserver/
# test_dashboard_browser.py): Debian's chromium and chromium-driver, installed
# only when missing, so a machine that has them (or cannot install) is left as
# it is. Without them that test is skipped, saying why.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    echo "chromium and chromedriver: present"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "no apt-get here: install Chromium and chromedriver at /usr/bin yourself" >&2
    echo "(the dashboard's browser test is skipped without them)" >&2
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo -n"  # never a password prompt: without one, no install
fi
$sudo apt-get update -q
$sudo apt-get install -y -q chromium chromium-driver
