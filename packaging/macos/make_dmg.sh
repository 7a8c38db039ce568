#!/usr/bin/env bash
# Make the macOS disk image from the PyInstaller app bundle (macOS only: uses hdiutil).
#
#   python3 packaging/build.py            # makes dist/Loadout.app (Apple Silicon build machine)
#   packaging/macos/make_dmg.sh           # makes dist/Loadout-<version>-macos-arm64.dmg
#
# The image holds Loadout.app and a link to /Applications: the artist drags one onto the other.
# Optional signing and notarization (without them macOS 15 refuses the first open: System Settings
# > Privacy & Security > Open Anyway; see docs/install.md). In CI, import_certificate.sh sets these:
#   CODESIGN_IDENTITY="Developer ID Application: ..."   signs the app (hardened runtime) and image
#   SIGNING_KEYCHAIN=path   the keychain holding that identity (default: the search list)
#   NOTARY_PROFILE=name   then submits the image to Apple's notary service (a profile stored with
#                         `xcrun notarytool store-credentials`) and staples the ticket
#   NOTARY_KEYCHAIN=path  the keychain that profile is stored in (default: the login keychain)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
app="$root/dist/Loadout.app"
if [ "$(uname -s)" != Darwin ]; then
    echo "make_dmg: run this on macOS (it needs hdiutil)" >&2
    exit 2
fi
if [ ! -d "$app" ]; then
    echo "make_dmg: $app is missing; build it first: python3 packaging/build.py" >&2
    exit 2
fi
version=$(/usr/libexec/PlistBuddy -c "Print :CFBundleShortVersionString" "$app/Contents/Info.plist")
arch=$(uname -m)
dmg="$root/dist/Loadout-$version-macos-$arch.dmg"

keychain=()
if [ -n "${SIGNING_KEYCHAIN:-}" ]; then keychain=(--keychain "$SIGNING_KEYCHAIN"); fi
notary_keychain=()
if [ -n "${NOTARY_KEYCHAIN:-}" ]; then notary_keychain=(--keychain "$NOTARY_KEYCHAIN"); fi

if [ -n "${CODESIGN_IDENTITY:-}" ]; then
    codesign --force --deep --options runtime --timestamp ${keychain[@]+"${keychain[@]}"} \
        --entitlements "$root/packaging/macos/entitlements.plist" --sign "$CODESIGN_IDENTITY" "$app"
    codesign --verify --deep --strict "$app"
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# ditto keeps the bundle's symlinks, permissions and extended attributes as they are
ditto "$app" "$stage/Loadout.app"
ln -s /Applications "$stage/Applications"

rm -f "$dmg"
# UDZO: zlib-compressed, read-only; HFS+ mounts on every supported macOS
hdiutil create -volname "Loadout $version" -srcfolder "$stage" -fs HFS+ -format UDZO \
    -imagekey zlib-level=9 -ov "$dmg"
hdiutil verify "$dmg"

if [ -n "${CODESIGN_IDENTITY:-}" ]; then
    codesign --force --timestamp ${keychain[@]+"${keychain[@]}"} --sign "$CODESIGN_IDENTITY" "$dmg"
    if [ -n "${NOTARY_PROFILE:-}" ]; then
        xcrun notarytool submit "$dmg" --keychain-profile "$NOTARY_PROFILE" ${notary_keychain[@]+"${notary_keychain[@]}"} --wait
        xcrun stapler staple "$dmg"
    fi
fi
echo "disk image: $dmg ($(du -h "$dmg" | cut -f1))"
