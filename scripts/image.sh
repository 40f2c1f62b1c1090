#!/usr/bin/env bash
# make image: tally's OCI image, built without a container runtime, and its
# SBOM beside it:
#
#   scripts/image.sh [OUT]      (default OUT: bin/image)
#
#   OUT/oci/            an OCI image layout (tag: the version), for skopeo,
#                       podman, containerd or a registry (skopeo copy
#                       oci:OUT/oci:TAG docker://REGISTRY/tally:TAG)
#   OUT/tally.cdx.json  the CycloneDX SBOM of the binary's modules
#   OUT/digest          the image manifest's digest
#
# The image holds one layer: the static tally binary (CGO_ENABLED=0,
# -trimpath, its version and revision stamped; the migrations are embedded
# in it, and `tally migrate up` runs them), the same migrations as SQL
# files under /usr/share/tally/migrations for the plain goose tool, the CA
# certificates of this machine's ca-certificates package, and /etc/passwd
# and /etc/group naming the user it runs as, tally (65532), never root. Its
# entrypoint is the binary; its labels are the OCI ones (source, revision,
# version, licenses, created, title, description). In the image intake
# listens on :8080 (TALLY_INTAKE_LISTEN), since a container's loopback
# address is its own.
#
# Reproducible: every file's time is SOURCE_DATE_EPOCH (default: the
# commit's time), owners are 0 or named, the layer is written in a fixed
# order, and the configuration's dates are that time too, so the same
# commit built twice gives the same digest (with the same Go toolchain,
# umoci and CA bundle).
#
# Settings (environment): SOURCE_DATE_EPOCH, IMAGE_VERSION (default: git
# describe --tags --always --dirty), IMAGE_SOURCE (default: the origin
# remote's URL), IMAGE_LICENSES (an SPDX expression; default NOASSERTION,
# as the repository states no license), GOARCH (default: this machine's).
#
# umoci builds it (installed with apt-get when missing, as root; see
# scripts/tool.sh).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/bin/image}"
say() { echo "image.sh: $*" >&2; }

umoci="$("$root/scripts/tool.sh" umoci umoci)"
cacerts=/etc/ssl/certs/ca-certificates.crt
if [[ ! -s "$cacerts" ]]; then
	"$root/scripts/tool.sh" update-ca-certificates ca-certificates >/dev/null
	[[ -s "$cacerts" ]] || { say "$cacerts is missing or empty: run update-ca-certificates"; exit 1; }
fi

git -C "$root" rev-parse --git-dir >/dev/null 2>&1 ||
	{ say "the image is stamped from git (revision, time): build it from a git checkout"; exit 1; }
revision="$(git -C "$root" rev-parse HEAD)"
version="${IMAGE_VERSION:-$(git -C "$root" describe --tags --always --dirty)}"
sde="${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct HEAD)}"
created="$(date -u -d "@$sde" +%Y-%m-%dT%H:%M:%SZ)"
# A remote URL may carry a user and a token: the label keeps neither.
source="${IMAGE_SOURCE:-$(git -C "$root" remote get-url origin 2>/dev/null | sed -E 's#//[^/@]*@#//#' || true)}"
source="${source:-NOASSERTION}"
licenses="${IMAGE_LICENSES:-NOASSERTION}"
arch="${GOARCH:-$(go env GOARCH)}"
tag="$version"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
layout="$work/oci"
bundle="$work/bundle"

"$umoci" init --layout "$layout"
"$umoci" new --image "$layout:$tag"
"$umoci" unpack --rootless --image "$layout:$tag" "$bundle" >/dev/null
rootfs="$bundle/rootfs"

say "building tally $version ($revision) for linux/$arch"
CGO_ENABLED=0 GOOS=linux GOARCH="$arch" GOFLAGS=-mod=readonly go -C "$root" build -trimpath -buildvcs=false \
	-ldflags "-s -w -X tally/cli.version=$version -X tally/cli.revision=$revision" \
	-o "$rootfs/usr/local/bin/tally" .
install -d -m 0755 "$rootfs/etc/ssl/certs" "$rootfs/usr/share/tally/migrations"
install -d -m 1777 "$rootfs/tmp"
install -m 0644 "$cacerts" "$rootfs/etc/ssl/certs/ca-certificates.crt"
install -m 0644 "$root"/migrations/*.sql "$rootfs/usr/share/tally/migrations/"
printf 'root:x:0:0:root:/root:/sbin/nologin\ntally:x:65532:65532:tally:/nonexistent:/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\ntally:x:65532:\n' >"$rootfs/etc/group"
chmod 0755 "$rootfs/usr/local/bin/tally" "$rootfs" "$rootfs/etc" "$rootfs/usr" "$rootfs/usr/local" \
	"$rootfs/usr/local/bin" "$rootfs/usr/share" "$rootfs/usr/share/tally" "$rootfs/etc/ssl"
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
find "$rootfs" -exec touch -h -d "@$sde" {} +

"$umoci" repack --history.created "$created" --history.created_by "make image (scripts/image.sh)" --image "$layout:$tag" "$bundle"
labels=(
	"org.opencontainers.image.title=tally"
	"org.opencontainers.image.description=an event-sourced ledger for low-risk polls"
	"org.opencontainers.image.source=$source"
	"org.opencontainers.image.revision=$revision"
	"org.opencontainers.image.version=$version"
	"org.opencontainers.image.licenses=$licenses"
	"org.opencontainers.image.created=$created"
)
config=(--image "$layout:$tag" --no-history --created "$created" --os linux --architecture "$arch"
	--config.user 65532:65532 --config.workingdir / --config.entrypoint /usr/local/bin/tally
	--config.exposedports 8080/tcp --config.env TALLY_INTAKE_LISTEN=:8080)
for l in "${labels[@]}"; do config+=(--config.label "$l" --manifest.annotation "$l"); done
"$umoci" config "${config[@]}"
"$umoci" gc --layout "$layout"

sbom="$work/tally.cdx.json"
go -C "$root" run ./internal/sbom -name tally -version "$version" -time "$sde" "$rootfs/usr/local/bin/tally" >"$sbom"

# umoci writes the blobs 0600; the layout is there for others to read
# (skopeo run by another user, a registry's pusher). No digest covers modes.
chmod -R a+rX "$layout"
digest="$(sed -nE 's/.*"digest":"(sha256:[0-9a-f]{64})".*/\1/p' "$layout/index.json")"
[[ -n "$digest" ]] || { say "no manifest digest in the layout's index.json"; exit 1; }
mkdir -p "$out"
rm -rf "$out/oci"
mv "$layout" "$out/oci"
mv "$sbom" "$out/tally.cdx.json"
echo "$digest" >"$out/digest"
size="$(du -sb "$out/oci/blobs" | cut -f1)"
say "oci:$out/oci:$tag $digest ($size bytes of blobs); SBOM $out/tally.cdx.json"
