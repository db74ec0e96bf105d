#!/usr/bin/env bash
# Installs the Debian packages the test suite drives for real: prometheus (server and promtool),
# prometheus-node-exporter (benchmark baseline), prometheus-alertmanager (alerts end to end, with amtool),
# chromium (landing page in a real browser) and victoria-metrics (the long-term store `make fleet` remote-writes to).
# Idempotent: does nothing when the commands are already present.
set -euo pipefail
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-node-exporter >/dev/null 2>&1 || [ -x /usr/bin/prometheus-node-exporter ] || need+=(prometheus-node-exporter)
command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v amtool >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v victoria-metrics >/dev/null 2>&1 || need+=(victoria-metrics)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
source "$(dirname "$0")/apt-install.sh"
apt_install install-system-deps "the tests" prometheus prometheus-node-exporter prometheus-alertmanager victoria-metrics -- "${need[@]}"
