#!/bin/sh
# On purge, removes the xkeeper user; the data in /var/lib/xkeeper stays.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
if [ "$1" = "purge" ] && getent passwd xkeeper >/dev/null; then
	deluser --system xkeeper >/dev/null || true
fi
