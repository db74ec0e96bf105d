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
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "install-system-deps: need root (or sudo) to install: ${need[*]}" >&2; exit 1; fi
fi
echo "make: installing Debian packages for the tests: ${need[*]} (apt-get, a minute or two) ..."
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Debian starts the services it installs where systemd runs; the tests start their own on free ports.
for svc in prometheus prometheus-node-exporter prometheus-alertmanager victoria-metrics; do
  if [ -d /run/systemd/system ]; then $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true; fi
done
