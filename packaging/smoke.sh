#!/usr/bin/env bash
# Smoke-run the frozen app the way an artist's machine would: no Python on PATH, an empty home,
# no screen (Qt's offscreen platform). It opens the window on the demo library, loads the demo
# checkpoint, applies the demo LoRA, places its text encoder, generates a picture and saves a
# screenshot.
#
#   packaging/smoke.sh [BINARY]        default: the build in dist/ for this OS
#
# Checks: exit status 0; the screenshot is a real PNG of a real window (not tiny, not empty);
# nothing was written into the app folder. Prints the wall time and what the app wrote under the
# temporary home. SMOKE_KEEP=DIR copies the screenshot and the log there (CI uploads them).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
case "$(uname -s)" in
    Linux*) os=linux; default="$root/dist/Loadout/Loadout" ;;
    Darwin*) os=macos; default="$root/dist/Loadout.app/Contents/MacOS/Loadout" ;;
    MINGW* | MSYS* | CYGWIN*) os=windows; default="$root/dist/Loadout/Loadout.exe" ;;
    *) echo "smoke: unknown system $(uname -s)" >&2; exit 2 ;;
esac
bin=${1:-$default}
if [ ! -x "$bin" ]; then
    echo "smoke: no frozen app at $bin (build it with: python3 packaging/build.py)" >&2
    exit 2
fi
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
# the folder that must stay untouched: the .app bundle on macOS, the one-folder app elsewhere
appdir=$(dirname "$bin")
if [ "$os" = macos ]; then appdir=$(cd "$appdir/../.." && pwd); fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/loadout-smoke.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
home="$tmp/home"
mkdir -p "$home"
shot="$tmp/shot.png"

listing() { (cd "$appdir" && find . | LC_ALL=C sort); }
listing > "$tmp/before.txt"
touch "$tmp/marker"
sleep 1 # a file the app writes gets an mtime clearly after the marker's, even on 1-second clocks

now() { if [ -n "${EPOCHREALTIME:-}" ]; then echo "${EPOCHREALTIME/,/.}"; else date +%s; fi; }

# A bare environment: HOME and the Qt platform only. PATH names no folder, so no Python (or
# anything else) can be found; on Windows the system folders must stay for Windows itself.
if [ "$os" = windows ]; then
    envargs=(SYSTEMROOT="${SYSTEMROOT:-C:\\Windows}" WINDIR="${WINDIR:-C:\\Windows}"
        TEMP="$(cygpath -w "$tmp")" TMP="$(cygpath -w "$tmp")" USERPROFILE="${USERPROFILE:-}"
        APPDATA="${APPDATA:-}" LOCALAPPDATA="${LOCALAPPDATA:-}" HOME="$home"
        PATH="/c/Windows/System32" QT_QPA_PLATFORM=offscreen)
    shot_arg=$(cygpath -w "$shot")
else
    envargs=(HOME="$home" PATH=/nonexistent TMPDIR="$tmp" QT_QPA_PLATFORM=offscreen)
    shot_arg=$shot
fi
if env -i "${envargs[@]}" /bin/sh -c 'command -v python3 || command -v python' > /dev/null 2>&1; then
    echo "smoke: a Python is reachable in the bare environment; the check would prove nothing" >&2
    exit 1
fi

echo "smoke: $bin --demo --screenshot $shot_arg"
start=$(now)
set +e
env -i "${envargs[@]}" "$bin" --demo --screenshot "$shot_arg" > "$tmp/log.txt" 2>&1
rc=$?
set -e
end=$(now)
seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')

if [ -n "${SMOKE_KEEP:-}" ]; then
    mkdir -p "$SMOKE_KEEP"
    cp "$tmp/log.txt" "$SMOKE_KEEP/smoke-log.txt"
    [ -f "$shot" ] && cp "$shot" "$SMOKE_KEEP/smoke-screenshot.png"
fi

fail() {
    echo "smoke: FAILED: $1" >&2
    echo "--- app output (last 40 lines) ---" >&2
    tail -n 40 "$tmp/log.txt" >&2
    exit 1
}

[ "$rc" -eq 0 ] || fail "exit status $rc after ${seconds}s"
[ -f "$shot" ] || fail "no screenshot at $shot"
size=$(wc -c < "$shot" | tr -d ' ')
# PNG signature, then the IHDR chunk's width and height (big-endian) at bytes 16..23
sig=$(od -An -tx1 -N8 "$shot" | tr -d ' \n')
[ "$sig" = "89504e470d0a1a0a" ] || fail "the screenshot is not a PNG"
read -r w1 w2 w3 w4 h1 h2 h3 h4 < <(od -An -tu1 -j16 -N8 "$shot")
width=$(((w1 << 24) | (w2 << 16) | (w3 << 8) | w4))
height=$(((h1 << 24) | (h2 << 16) | (h3 << 8) | h4))
[ "$width" -ge 640 ] && [ "$height" -ge 400 ] || fail "the screenshot is only ${width}x${height}"
[ "$size" -ge 20000 ] || fail "the screenshot is only $size bytes: an empty window?"

listing > "$tmp/after.txt"
if ! diff "$tmp/before.txt" "$tmp/after.txt" > "$tmp/diff.txt"; then
    cat "$tmp/diff.txt" >&2
    fail "files appeared in or vanished from $appdir"
fi
changed=$(find "$appdir" -newer "$tmp/marker" | head -n 20)
[ -z "$changed" ] || fail "the app changed files in its own folder: $changed"

echo "smoke: OK in ${seconds}s (end to end: start, demo library, checkpoint load, LoRA, a generated" \
    "picture, screenshot); screenshot ${width}x${height}, $size bytes; app folder unchanged"
echo "smoke: written under the temporary home:"
(cd "$home" && find . -mindepth 1 -maxdepth 4 | LC_ALL=C sort | sed 's/^\./    ~/')
