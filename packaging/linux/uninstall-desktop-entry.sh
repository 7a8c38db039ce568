#!/bin/sh
# Take Loadout out of this user's application menu (what install-desktop-entry.sh added).
#   --purge   also delete Loadout's settings, cache and demo library (never your own models)
# The program itself is this folder: delete it afterwards.
set -eu

purge=no
case "${1:-}" in
    --purge) purge=yes ;;
    "") ;;
    *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
esac

here=$(cd "$(dirname "$0")" && pwd -P)
data="${XDG_DATA_HOME:-$HOME/.local/share}"
config="${XDG_CONFIG_HOME:-$HOME/.config}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}"

removed() { echo "removed $1"; }

for f in "$data/applications/loadout.desktop" "$data/icons/hicolor/256x256/apps/loadout.png"; do
    if [ -e "$f" ]; then rm -f "$f" && removed "$f"; fi
done
link="$HOME/.local/bin/loadout"
if [ -L "$link" ]; then
    case "$(readlink "$link")" in
        */Loadout) rm -f "$link" && removed "$link" ;;
        *) echo "left $link: it does not point at a Loadout program" ;;
    esac
fi

if [ "$purge" = yes ]; then
    for d in "$config/Loadout" "$cache/Loadout" "$data/Loadout/demo-library"; do
        if [ -e "$d" ]; then rm -rf "$d" && removed "$d"; fi
    done
    own="$data/Loadout/models"
    if [ -d "$own" ]; then
        # Loadout's own model folder: removed only when empty
        if rmdir "$own" 2>/dev/null; then removed "$own"; else echo "kept $own: it holds your models"; fi
    fi
    rmdir "$data/Loadout" 2>/dev/null || true
fi
echo "Loadout is out of the menu. The program is still in $here: delete that folder to finish."
