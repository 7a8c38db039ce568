#!/usr/bin/env bash
# Measure the frozen Linux app's start-up, as docs/install.md and docs/benchmarks.md report it.
#
#   packaging/measure_startup.sh [BINARY] [RUNS]      defaults: dist/Loadout/Loadout, 3
#
# 1. time to window: the app starts on a virtual X screen (Xvfb) with an empty home (a first
#    start) and the clock stops when its main window is mapped and visible (polled with xdotool
#    every 10 ms); then the app is sent SIGTERM and must exit with status 0 within 30 s (as at a
#    log-out). Nothing is added to the app for this.
# 2. end to end: packaging/smoke.sh (start, demo library, checkpoint load, LoRA, test run,
#    screenshot, exit).
# Each is run RUNS times warm (files in the page cache) and, as root, once cold first (the page
# cache dropped: the first start after a reboot or a fresh unpack).
# Needs: Xvfb and xdotool (Debian: apt-get install xvfb xdotool), and Qt's X11 libraries
# (libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxkbcommon-x11-0 ...).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/dist/Loadout/Loadout}
runs=${2:-3}
for tool in Xvfb xdotool; do
    command -v "$tool" > /dev/null || { echo "measure: $tool is missing" >&2; exit 2; }
done

tmp=$(mktemp -d)
display=:$((90 + RANDOM % 100))
Xvfb "$display" -screen 0 1920x1080x24 -nolisten tcp > "$tmp/xvfb.log" 2>&1 &
xvfb=$!
cleanup() { kill "$xvfb" 2> /dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
for _ in $(seq 100); do xdotool getdisplaygeometry --display "$display" > /dev/null 2>&1 && break; sleep 0.05; done

# MEASURE_WARM_ONLY=1 skips the cold runs (a shared machine: dropping the page cache slows the others)
can_drop() { [ -z "${MEASURE_WARM_ONLY:-}" ] && [ "$(id -u)" = 0 ] && [ -w /proc/sys/vm/drop_caches ]; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

time_to_window() {
    local home="$tmp/home-$RANDOM" start end pid
    mkdir -p "$home"
    start=$EPOCHREALTIME
    env -i HOME="$home" PATH=/nonexistent DISPLAY="$display" "$bin" > "$tmp/app.log" 2>&1 &
    pid=$!
    until DISPLAY=$display xdotool search --onlyvisible --pid "$pid" > /dev/null 2>&1; do
        if ! kill -0 "$pid" 2> /dev/null; then
            echo "measure: the app exited before showing a window:" >&2
            cat "$tmp/app.log" >&2
            exit 1
        fi
        sleep 0.01
    done
    end=$EPOCHREALTIME
    # SIGTERM closes the window through its event loop (app/gui/stop_signals.py), as a log-out does
    kill -TERM "$pid"
    for _ in $(seq 300); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2> /dev/null; then
        kill -KILL "$pid"
        echo "measure: the app ignored SIGTERM for 30 s (killed)" >&2
        exit 1
    fi
    local status=0
    wait "$pid" 2> /dev/null || status=$?
    if [ "$status" -ne 0 ]; then
        echo "measure: the app exited with status $status after SIGTERM:" >&2
        cat "$tmp/app.log" >&2
        exit 1
    fi
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }'
}

smoke_time() {
    "$root/packaging/smoke.sh" "$bin" | sed -n 's/^smoke: OK in \([0-9.]*\)s.*/\1/p'
}

echo "binary: $bin"
if can_drop; then
    drop_caches
    echo "time to window, cold: $(time_to_window) s"
    drop_caches
    echo "end to end (smoke), cold: $(smoke_time) s"
else
    echo "(cold starts not measured: not root, or MEASURE_WARM_ONLY set)"
fi
warm_w=() warm_s=()
for _ in $(seq "$runs"); do warm_w+=("$(time_to_window)"); done
for _ in $(seq "$runs"); do warm_s+=("$(smoke_time)"); done
echo "time to window, warm: ${warm_w[*]} s"
echo "end to end (smoke), warm: ${warm_s[*]} s"
