#!/bin/sh
# Installs the external servers that testenv starts for tests (or only the
# packages named as arguments), on Debian 12
# (or a derivative with the same packages). Idempotent: installs only what is
# missing, runs apt-get update at most once, and never leaves the system
# ClickHouse service running (testenv runs its own servers on free ports).
#
# Packages:
#   libzookeeper-java     Apache ZooKeeper 3.8 jars (/usr/share/java/zookeeper.jar);
#                         testenv runs java on them directly. The `zookeeper`
#                         package only adds scripts and config but depends on
#                         default-jre, which drags in the GUI JRE and X11 libraries.
#   default-jre-headless  java for ZooKeeper.
#   clickhouse-server     ClickHouse 18.16 (/usr/sbin/clickhouse-server).
#   clickhouse-client     for debugging by hand; tests use the HTTP interface.
#   systemd, adduser      systemd-analyze checks the package's unit; the package's
#                         scripts create its user (packaging/, XKEEPER_PACKAGE_TEST=1).
#   iproute2, nftables    network namespaces for nodes and the packet filters that
#                         cut them apart (testenv.StartNet; root only).
#   e2fsprogs, util-linux a loop-mounted ext4 disk that fsfreeze makes hang
#                         (testenv.StartDisk; root only).
#
# Without arguments it also fetches ClickHouse 26.7 as a shared library:
# libchdb from the npm package @chdb/lib-linux-x64-gnu (CHDB_VERSION, its
# tarball's SHA-1 checked), into ${XDG_CACHE_HOME:-$HOME/.cache}/xkeeper/chdb/VERSION/libchdb.so
# (testenv.CHDBLibrary; reused when present; npm is installed from apt if
# missing). Only on x86_64 Linux with glibc.
set -eu

CHDB_VERSION=26.7.3-stable.1
CHDB_SHA1=d2905fafd0e0ac0e231cccadd1f0f6d010977297

PACKAGES="libzookeeper-java default-jre-headless clickhouse-server clickhouse-client systemd adduser iproute2 nftables e2fsprogs util-linux"
# Packages named on the command line replace the list (xkeeper demo asks
# for clickhouse-server alone), and libchdb is not fetched.
FETCH_CHDB=1
if [ "$#" -gt 0 ]; then
	PACKAGES="$*"
	FETCH_CHDB=""
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	SUDO="sudo"
fi

missing=""
for pkg in $PACKAGES; do
	if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
		missing="$missing $pkg"
	fi
done

if [ -n "$missing" ]; then
	echo "install-deps: installing$missing"
	# Keep maintainer scripts from starting services (clickhouse-server would
	# take ports 8123, 9000 and 9009); leave an existing policy alone.
	policy=/usr/sbin/policy-rc.d
	own_policy=""
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
		$SUDO chmod 755 "$policy"
		own_policy=1
	fi
	# shellcheck disable=SC2086 # word splitting of $missing is intended
	if ! { $SUDO apt-get update &&
		$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing; }; then
		[ -z "$own_policy" ] || $SUDO rm -f "$policy"
		exit 1
	fi
	[ -z "$own_policy" ] || $SUDO rm -f "$policy"
else
	echo "install-deps: all of $PACKAGES already installed"
fi

# On a systemd host the package enables the service; stop and disable it so it
# does not hold the default ports or compete for CPU. Without systemd nothing
# was started.
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
	$SUDO systemctl disable --now clickhouse-server.service >/dev/null 2>&1 || true
fi

java -version 2>&1 | head -n 1
ls /usr/share/java/zookeeper.jar /usr/sbin/clickhouse-server
# shellcheck disable=SC2086
dpkg-query -W $PACKAGES

# libchdb: ClickHouse 26.7 in-process (testenv/chdb.go), cached by version.
if [ -n "$FETCH_CHDB" ] && [ "$(uname -m)" = x86_64 ] && ldd --version 2>&1 | grep -qi 'glibc\|gnu libc'; then
	chdb_dir="${XDG_CACHE_HOME:-$HOME/.cache}/xkeeper/chdb/$CHDB_VERSION"
	if [ ! -s "$chdb_dir/libchdb.so" ]; then
		if ! command -v npm >/dev/null 2>&1; then
			sh "$0" npm
		fi
		echo "install-deps: fetching @chdb/lib-linux-x64-gnu@$CHDB_VERSION (about 180 MB) with npm"
		tmp=$(mktemp -d)
		trap 'rm -rf "$tmp"' EXIT
		npm pack --silent --cache "$tmp/npm-cache" --pack-destination "$tmp" "@chdb/lib-linux-x64-gnu@$CHDB_VERSION" >/dev/null
		echo "$CHDB_SHA1  $tmp/chdb-lib-linux-x64-gnu-$CHDB_VERSION.tgz" | sha1sum -c --quiet -
		tar -xzf "$tmp/chdb-lib-linux-x64-gnu-$CHDB_VERSION.tgz" -C "$tmp" package/libchdb.so
		mkdir -p "$chdb_dir"
		# Renamed into place whole, so that a fetch cut short leaves no library behind.
		mv "$tmp/package/libchdb.so" "$chdb_dir/libchdb.so.part"
		mv "$chdb_dir/libchdb.so.part" "$chdb_dir/libchdb.so"
	fi
	ls -l "$chdb_dir/libchdb.so"
fi
