#!/usr/bin/env bash
# Remove the headroom service. Run as root:  sudo systemd/uninstall.sh [--purge]
#
# Stops and disables the unit, removes it and /opt/headroom (venv, docs). Keeps /etc/headroom,
# /etc/default/headroom, drop-ins, /var/lib/headroom and the headroom user unless --purge
# (from make: sudo make uninstall PURGE=1; make itself refuses --purge as one of its own options).
#
# Environment: ROOT=/some/dir works as in install.sh (remove files under that prefix, touch no
# systemd and no users).
set -euo pipefail

say() { echo "uninstall.sh: $*"; }
die() { echo "uninstall.sh: error: $*" >&2; exit 1; }

purge=0
for arg in "$@"; do
  case "$arg" in
    --purge) purge=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) die "unknown argument $arg (usage: $0 [--purge])" ;;
  esac
done

ROOT="${ROOT:-}"
ROOT="${ROOT%/}"
if [ -z "$ROOT" ] && [ "$(id -u)" != 0 ]; then
  die "run as root (sudo $0), or set ROOT=DIR"
fi
systemd_here=0
if [ -z "$ROOT" ] && [ -d /run/systemd/system ]; then systemd_here=1; fi

if [ "$systemd_here" = 1 ]; then
  systemctl disable --now headroom.service 2>/dev/null || true
fi
rm -f "$ROOT/etc/systemd/system/headroom.service"
rm -rf "$ROOT/opt/headroom"
say "removed the unit and $ROOT/opt/headroom"

if [ "$purge" = 1 ]; then
  rm -rf "$ROOT/etc/headroom" "$ROOT/etc/default/headroom" "$ROOT/etc/systemd/system/headroom.service.d" \
         "$ROOT/var/lib/headroom"
  say "purged $ROOT/etc/headroom, $ROOT/etc/default/headroom, drop-ins and $ROOT/var/lib/headroom"
  if [ -z "$ROOT" ] && getent passwd headroom >/dev/null; then
    userdel headroom && say "removed user headroom"
  fi
else
  kept="$ROOT/etc/headroom, $ROOT/etc/default/headroom, drop-ins and $ROOT/var/lib/headroom"
  if [ -z "$ROOT" ] && getent passwd headroom >/dev/null; then kept="$kept and the user headroom"; fi
  say "kept $kept; to remove them too: sudo make uninstall PURGE=1 (or sudo systemd/uninstall.sh --purge)"
fi

if [ "$systemd_here" = 1 ]; then
  systemctl daemon-reload
  systemctl reset-failed headroom.service 2>/dev/null || true
fi
