#!/usr/bin/env bash
# Builds the Debian package of xkeeper into dist/: the binary (with its
# version linked in), the systemd unit xkeeper@.service, a commented
# /etc/xkeeper/cluster.yaml and the xkeeper user. Usage:
#   bash scripts/build-deb.sh [VERSION]     (default: from the git tag or commit)
set -euo pipefail
cd "$(dirname "$0")/.."
NFPM_VERSION=v2.45.2
# A release tag v1.2.3 gives 1.2.3; an untagged commit 0.0.0~gitYYYYMMDD.SHA.
version=${1:-$(git describe --tags --match 'v[0-9]*' 2>/dev/null ||
	git log -1 --format='0.0.0~git%cd.%h' --date=format:%Y%m%d)}
version=${version#v}
export XKEEPER_VERSION=$version GOARCH=${GOARCH:-$(go env GOARCH)}
BUILD_DIR=dist/build # nfpm.yaml names the files here
rm -rf "$BUILD_DIR"
mkdir -p "$BUILD_DIR"

CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.releaseVersion=$version" -o "$BUILD_DIR/xkeeper" ./cmd/xkeeper
"$BUILD_DIR/xkeeper" config default >"$BUILD_DIR/cluster.yaml"
GOBIN="$PWD/$BUILD_DIR/bin" go install "github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION"
"$BUILD_DIR/bin/nfpm" package --config packaging/nfpm.yaml --packager deb --target dist/
rm -rf "$BUILD_DIR"
ls "dist/xkeeper_${version}_${GOARCH}.deb"
