#!/bin/sh
# Take Loadout out of this user's application menu (what install-desktop-entry.sh added).
#   --purge            also delete what Loadout wrote for you: settings, cache, the queue file and
#                      the demo library; Loadout's own model folder and ~/Pictures/Loadout only
#                      when they are empty (your models and pictures are never deleted)
#   --purge-pictures   with --purge: delete ~/Pictures/Loadout even when it holds pictures
# The program itself is this folder: delete it afterwards.
set -eu

purge=no pictures=keep
for arg in "$@"; do
    case "$arg" in
        --purge) purge=yes ;;
        --purge-pictures) pictures=delete ;;
        *) echo "usage: $0 [--purge [--purge-pictures]]" >&2; exit 2 ;;
    esac
done
if [ "$pictures" = delete ] && [ "$purge" = no ]; then
    echo "usage: --purge-pictures goes with --purge" >&2
    exit 2
fi

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
    # settings, the inspect cache, the demo library (its pictures included), the queue file
    # (Qt's app data folder: <data>/Loadout/Loadout) with SQLite's journal files
    for d in "$config/Loadout" "$cache/Loadout" "$data/Loadout/demo-library" \
        "$data/Loadout/Loadout/queue.sqlite" "$data/Loadout/Loadout/queue.sqlite-wal" \
        "$data/Loadout/Loadout/queue.sqlite-shm" "$data/Loadout/Loadout/queue.sqlite-journal"; do
        if [ -e "$d" ]; then rm -rf "$d" && removed "$d"; fi
    done
    rmdir "$data/Loadout/Loadout" 2> /dev/null || true
    own="$data/Loadout/models"
    if [ -d "$own" ]; then
        # Loadout's own model folder: removed only when empty
        if rmdir "$own" 2> /dev/null; then removed "$own"; else echo "kept $own: it holds your models"; fi
    fi
    rmdir "$data/Loadout" 2> /dev/null || true
    # the pictures folder Loadout saves into by default (XDG's Pictures folder, as Qt finds it)
    pics_home=$(xdg-user-dir PICTURES 2> /dev/null || true)
    if [ -z "$pics_home" ] || [ "$pics_home" = "$HOME" ]; then pics_home="$HOME/Pictures"; fi
    pics="$pics_home/Loadout"
    if [ -d "$pics" ]; then
        if [ "$pictures" = delete ]; then
            rm -rf "$pics" && removed "$pics"
        elif find "$pics" -type f -print -quit | grep -q .; then
            echo "kept $pics: it holds your pictures (add --purge-pictures to delete them too)"
        else
            rm -rf "$pics" && removed "$pics (it held no pictures)"
        fi
    fi
fi
echo "Loadout is out of the menu. The program is still in $here: delete that folder to finish."
