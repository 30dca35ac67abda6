// Package packaging holds the Debian package of xkeeper (nfpm.yaml, the
// systemd unit xkeeper@.service, the maintainer scripts; built by
// scripts/build-deb.sh) and its test, which installs it on a systemd
// booted for the test in namespaces of its own and drives the unit with
// systemctl.
package packaging
