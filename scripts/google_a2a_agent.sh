#!/usr/bin/env bash
# Google's UCP A2A business agent (the UCP samples, a2a/business_agent) on
# loopback, its Gemini model replaced by the scripted stand-in
# samples/a2a/fake_gemini.py: no key, and the same answer every time, so a
# Platform can drive a whole checkout against it (docs/proxy.md, "Google's A2A
# business agent"). Not used by `make test`.
#
#   scripts/google_a2a_agent.sh [DIR]             install into DIR (default /tmp/gba) if
#                                                 need be, start both, stop both on Ctrl-C
#   scripts/google_a2a_agent.sh --detach [DIR]    start both and leave them running
#                                                 (pids and logs in DIR)
#   scripts/google_a2a_agent.sh --install [DIR]   install only
#
# Environment: AGENT_PORT (10999: the port the agent card and the product images
# name), GEMINI_PORT (8398), PYTHON (a Python 3.13: the agent's pyproject asks
# for it; default python3.13, else pyenv's 3.13.0), SAMPLES (a git directory of
# the UCP samples repository; default the mirror under /work/.mirror if present,
# else a shallow clone of https://github.com/Universal-Commerce-Protocol/samples).
# The install takes the agent's uv.lock as it is (uv sync --frozen: 113
# packages, 470 MB with pyarrow, grpcio and google-cloud-*): 6 to 15 s here
# on a fast network; the agent then takes about 8 s to start (its imports).
set -euo pipefail

mode=foreground
case "${1:-}" in
    --detach) mode=detach; shift ;;
    --install) mode=install; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
esac
dir="${1:-/tmp/gba}"
root="$(cd "$(dirname "$0")/.." && pwd)"
agent_port="${AGENT_PORT:-10999}"
gemini_port="${GEMINI_PORT:-8398}"
mirror=/work/.mirror/Universal-Commerce-Protocol+samples/repo
samples="${SAMPLES:-}"
if [ -z "$samples" ] && [ -d "$mirror" ]; then samples="$mirror"; fi
is_313() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' 2>/dev/null; }
python="${PYTHON:-}"
if [ -z "$python" ]; then  # a pyenv shim may be on PATH and still not run
    for candidate in python3.13 /root/.pyenv/versions/3.13.0/bin/python; do
        if is_313 "$candidate"; then python="$candidate"; break; fi
    done
fi
src="$dir/a2a/business_agent"
mkdir -p "$dir"

# 1. The agent's source (kept as it is: nothing in it is patched).
if [ ! -f "$src/uv.lock" ]; then
    mkdir -p "$src"
    if [ -n "$samples" ]; then
        echo "agent source: $samples (a2a/business_agent at HEAD)"
        git --git-dir="$samples" archive HEAD:a2a/business_agent | tar -x -C "$src"
    else
        echo "agent source: a shallow clone of github.com/Universal-Commerce-Protocol/samples"
        rm -rf "$dir/samples-clone"
        git clone -q --depth 1 https://github.com/Universal-Commerce-Protocol/samples \
            "$dir/samples-clone"
        cp -r "$dir/samples-clone/a2a/business_agent/." "$src/"
    fi
fi

# 2. Its virtualenv, from its uv.lock (uv itself in a venv of its own).
if [ ! -x "$dir/venv/bin/business_agent" ]; then
    if [ -z "$python" ] || ! is_313 "$python"; then
        echo "no Python 3.13 found (${python:-none}; set PYTHON): the agent needs one" >&2
        exit 1
    fi
    start=$(date +%s)
    [ -x "$dir/uvenv/bin/uv" ] || { "$python" -m venv "$dir/uvenv" \
        && "$dir/uvenv/bin/pip" install -q uv; }
    (cd "$src" && UV_PROJECT_ENVIRONMENT="$dir/venv" \
        "$dir/uvenv/bin/uv" sync --frozen --no-dev --python "$python" -q)
    echo "installed in $(( $(date +%s) - start )) s: $dir/venv"
else
    echo "installed already: $dir/venv"
fi
[ "$mode" = install ] && exit 0

# 3. The stand-in model, then the agent pointed at it (loopback only).
wait_for() {  # url, pid, log: until the url answers, or the process has died
    for _ in $(seq 1 240); do
        if "$dir/venv/bin/python" -c "import sys, httpx; httpx.get(sys.argv[1]).raise_for_status()" \
            "$1" 2>/dev/null; then return 0; fi
        if ! kill -0 "$2" 2>/dev/null; then
            echo "it stopped before answering $1; its log ($3):" >&2
            tail -20 "$3" >&2
            return 1
        fi
        sleep 0.25
    done
    echo "no answer from $1 within a minute (log: $3)" >&2
    return 1
}
"$dir/venv/bin/python" "$root/samples/a2a/fake_gemini.py" --port "$gemini_port" \
    >"$dir/fake_gemini.log" 2>&1 &
gemini_pid=$!
pids="$gemini_pid"
keep=no  # on any failure (and on Ctrl-C in the foreground) both are stopped
trap '[ "$keep" = yes ] || kill $pids 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM
wait_for "http://127.0.0.1:$gemini_port/" "$gemini_pid" "$dir/fake_gemini.log"
(cd "$src" && exec env -u GOOGLE_GENAI_USE_VERTEXAI -u GEMINI_API_KEY \
    GOOGLE_GEMINI_BASE_URL="http://127.0.0.1:$gemini_port" GOOGLE_API_KEY=fake-key \
    "$dir/venv/bin/business_agent" --host 127.0.0.1 --port "$agent_port") \
    >"$dir/agent.log" 2>&1 &
agent_pid=$!
pids="$gemini_pid $agent_pid"
card="http://127.0.0.1:$agent_port/.well-known/agent-card.json"
wait_for "$card" "$agent_pid" "$dir/agent.log"
echo "stand-in model: http://127.0.0.1:$gemini_port (pid $gemini_pid, log $dir/fake_gemini.log)"
echo "agent (pid $agent_pid, log $dir/agent.log), JSON-RPC at http://127.0.0.1:$agent_port/"
echo "agent card: $card"
if [ "$mode" = detach ]; then
    echo "$gemini_pid" >"$dir/fake_gemini.pid"
    echo "$agent_pid" >"$dir/agent.pid"
    echo "stop with: kill $agent_pid $gemini_pid"
    keep=yes
    exit 0
fi
echo "Ctrl-C stops both"
wait -n  # either one ending ends both
