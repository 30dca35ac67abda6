// Package packaging holds the Debian package of xkeeper (nfpm.yaml, the
// systemd unit xkeeper@.service, the maintainer scripts; built by
// scripts/build-deb.sh) and its test, which installs it on this machine.
package packaging
