#!/usr/bin/env bash
# Put the Developer ID certificate (and the notary credentials) into a temporary keychain, for
# make_dmg.sh to sign and notarize with. For CI; skips cleanly when the secrets are not set.
#
#   MACOS_CERTIFICATE_P12       the "Developer ID Application" certificate with its key, .p12, base64
#   MACOS_CERTIFICATE_PASSWORD  the .p12's password
#   MACOS_CODESIGN_IDENTITY     e.g. "Developer ID Application: Jane Doe (TEAMID1234)"
#   MACOS_NOTARY_APPLE_ID, MACOS_NOTARY_TEAM_ID, MACOS_NOTARY_PASSWORD (an app-specific password)
#                               optional: notarization (without them the image is signed only)
#
# Writes CODESIGN_IDENTITY, NOTARY_PROFILE, NOTARY_KEYCHAIN and SIGNING_KEYCHAIN to $GITHUB_ENV
# (or prints them as `export` lines without it). With no certificate set it says so, writes
# nothing and exits 0: the build goes on unsigned (docs/install.md says what artists then see).
set -euo pipefail

out=${GITHUB_ENV:-/dev/stdout}
emit() { if [ "$out" = /dev/stdout ]; then echo "export $1=$(printf '%q' "$2")"; else echo "$1=$2" >> "$out"; fi; }

if [ -z "${MACOS_CERTIFICATE_P12:-}" ]; then
    echo "import_certificate: MACOS_CERTIFICATE_P12 is not set: building unsigned (not notarized)" >&2
    exit 0
fi
for var in MACOS_CERTIFICATE_PASSWORD MACOS_CODESIGN_IDENTITY; do
    if [ -z "${!var:-}" ]; then
        echo "import_certificate: MACOS_CERTIFICATE_P12 is set but $var is not: set both or neither" >&2
        exit 1
    fi
done
if [ "$(uname -s)" != Darwin ]; then
    echo "import_certificate: the certificate goes into a macOS keychain; run this on macOS" >&2
    exit 2
fi

tmp=${RUNNER_TEMP:-${TMPDIR:-/tmp}}
keychain="$tmp/loadout-signing.keychain-db"
password=$(openssl rand -hex 24)
p12="$tmp/loadout-certificate.p12"
trap 'rm -f "$p12"' EXIT
printf '%s' "$MACOS_CERTIFICATE_P12" | base64 --decode > "$p12"

security create-keychain -p "$password" "$keychain"
security set-keychain-settings -lut 21600 "$keychain" # locks again after 6 hours
security unlock-keychain -p "$password" "$keychain"
security import "$p12" -k "$keychain" -P "$MACOS_CERTIFICATE_PASSWORD" -T /usr/bin/codesign -T /usr/bin/productsign
security set-key-partition-list -S apple-tool:,apple:,codesign: -s -k "$password" "$keychain" > /dev/null
# codesign finds identities only in keychains on the search list: ours first, the others kept
# shellcheck disable=SC2046  # the list is one path per line, quoted by security itself
security list-keychains -d user -s "$keychain" $(security list-keychains -d user | tr -d '"')
if ! security find-identity -v -p codesigning "$keychain" | grep -qF "$MACOS_CODESIGN_IDENTITY"; then
    echo "import_certificate: the keychain holds no signing identity named '$MACOS_CODESIGN_IDENTITY':" >&2
    security find-identity -v -p codesigning "$keychain" >&2
    exit 1
fi
emit CODESIGN_IDENTITY "$MACOS_CODESIGN_IDENTITY"
emit SIGNING_KEYCHAIN "$keychain"

if [ -n "${MACOS_NOTARY_APPLE_ID:-}" ] && [ -n "${MACOS_NOTARY_TEAM_ID:-}" ] && [ -n "${MACOS_NOTARY_PASSWORD:-}" ]; then
    xcrun notarytool store-credentials loadout-notary --apple-id "$MACOS_NOTARY_APPLE_ID" \
        --team-id "$MACOS_NOTARY_TEAM_ID" --password "$MACOS_NOTARY_PASSWORD" --keychain "$keychain"
    emit NOTARY_PROFILE loadout-notary
    emit NOTARY_KEYCHAIN "$keychain"
else
    echo "import_certificate: no notary credentials: the image is signed but not notarized" >&2
fi
echo "import_certificate: signing as $MACOS_CODESIGN_IDENTITY from $keychain" >&2
