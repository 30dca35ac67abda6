#!/bin/sh
# Creates the xkeeper system user and its state directory.
set -e
if ! getent passwd xkeeper >/dev/null; then
	adduser --system --group --home /var/lib/xkeeper --no-create-home --shell /usr/sbin/nologin xkeeper >/dev/null
fi
install -d -o xkeeper -g xkeeper -m 0750 /var/lib/xkeeper
# The cluster file may hold secrets: readable by root and the xkeeper group.
chgrp xkeeper /etc/xkeeper/cluster.yaml
chmod 0640 /etc/xkeeper/cluster.yaml
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
