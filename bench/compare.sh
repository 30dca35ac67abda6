#!/usr/bin/env bash
# Side-by-side comparison of a 3-member xkeeper shard with a 3-member Apache
# ZooKeeper 3.8 ensemble on this machine (issue 5), written as BENCHMARKS.md.
#
#   bash bench/compare.sh                  # full run (about half an hour on 2 cores; needs a quiet machine):
#                                          # writes BENCHMARKS.md at the repository root
#   bash bench/compare.sh --short          # smoke form (seconds, tiny sizes, no verdict means anything):
#                                          # writes a temporary report and prints its path
#   bash bench/compare.sh --report PATH    # write the report to PATH instead
#
# Settings (environment): XKEEPER_BENCH_DURATION (per workload, default 10s),
# XKEEPER_BENCH_WARMUP (2s), XKEEPER_BENCH_CLIENTS (1,16,64),
# XKEEPER_BENCH_ZNODES (largest memory point, 1000000), XKEEPER_BENCH_ZK_HEAP
# (ZooKeeper's -Xmx, 2g). The servers keep their data under TMPDIR (default
# /tmp): point it at the disk to measure. Needs what .ci/install-deps.sh installs.
set -euo pipefail

short=""
report="${XKEEPER_BENCH_REPORT:-}"
while [ $# -gt 0 ]; do
	case "$1" in
	--short) short=1 ;;
	--report)
		[ $# -ge 2 ] || { echo "compare.sh: --report needs a path" >&2; exit 2; }
		report="$2"
		shift
		;;
	*)
		echo "usage: bash bench/compare.sh [--short] [--report PATH]" >&2
		exit 2
		;;
	esac
	shift
done

if [ -n "$report" ]; then
	report="$(realpath -m "$report")"
elif [ -n "$short" ]; then
	report="$(mktemp -d)/BENCHMARKS.md"
fi
cd "$(dirname "$0")/.."
export XKEEPER_REQUIRE_ZOOKEEPER=1
[ -z "$report" ] || export XKEEPER_BENCH_REPORT="$report"

args=(-run '^TestCompare$' -count=1 -v)
if [ -n "$short" ]; then
	go test -short -timeout 5m "${args[@]}" ./bench/compare
else
	XKEEPER_BENCH=1 go test -timeout 0 "${args[@]}" ./bench/compare
fi
echo "compare.sh: report written to ${report:-$(pwd)/BENCHMARKS.md}"
