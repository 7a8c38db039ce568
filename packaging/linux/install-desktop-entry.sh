#!/bin/sh
# Add Loadout to this user's application menu (no root needed):
#   ~/.local/share/applications/loadout.desktop   the menu entry, pointing at this folder
#   ~/.local/share/icons/hicolor/256x256/apps/loadout.png
#   ~/.local/bin/loadout                          a link to the program, for the command line
# Run it again after moving this folder. uninstall-desktop-entry.sh takes all three away.
set -eu

here=$(cd "$(dirname "$0")" && pwd -P)
app="$here/Loadout"
data="${XDG_DATA_HOME:-$HOME/.local/share}"
apps="$data/applications"
icons="$data/icons/hicolor/256x256/apps"
bin="$HOME/.local/bin"

if [ ! -x "$app" ]; then
    echo "install-desktop-entry: $app is missing; run this script from the unpacked Loadout folder." >&2
    exit 1
fi
mkdir -p "$apps" "$icons" "$bin"
cp "$here/loadout.png" "$icons/loadout.png"

# Exec takes a quoted path (it may hold spaces); inside the quotes \ " ` $ are escaped.
quoted=$(printf '%s' "$app" | sed -e 's/[\\"`$]/\\&/g')
tmp="$apps/.loadout.desktop.$$"
while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in
        Exec=*) printf 'Exec="%s"\n' "$quoted" ;;
        TryExec=*) printf 'TryExec=%s\n' "$app" ;;
        *) printf '%s\n' "$line" ;;
    esac
done < "$here/loadout.desktop" > "$tmp"
chmod 644 "$tmp"
mv "$tmp" "$apps/loadout.desktop"

if [ -e "$bin/loadout" ] && [ ! -L "$bin/loadout" ]; then
    echo "install-desktop-entry: $bin/loadout exists and is not a link; left as it is." >&2
else
    ln -sfn "$app" "$bin/loadout"
fi

# No cache to refresh: desktops watch these folders (the entry declares no file types, so
# update-desktop-database has nothing to do, and a user-level icon cache would go stale).

echo "Loadout is in your application menu (it may take a moment to appear)."
echo "  menu entry: $apps/loadout.desktop"
echo "  icon:       $icons/loadout.png"
echo "  command:    $bin/loadout -> $app"
case ":${PATH:-}:" in
    *":$bin:"*) ;;
    *) echo "  ($bin is not on your PATH: the 'loadout' command works after adding it there.)" ;;
esac
