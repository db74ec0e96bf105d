# Sourced by tests/install-system-deps.sh and tests/install-real-debian.sh: the one way the suite installs Debian
# packages. apt_install LABEL WHAT SERVICE... -- PACKAGE...: installs the packages (deduplicated) as root or with
# sudo, one "make:" line saying WHAT, then stops and disables the SERVICEs Debian starts where systemd runs (the
# tests start their own, on their own ports and temp dirs). Nothing to install: returns at once.
apt_install() {
  local label=$1 what=$2
  shift 2
  local services=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do services+=("$1"); shift; done
  shift || true
  [ $# -eq 0 ] && return 0
  local need
  mapfile -t need < <(printf '%s\n' "$@" | sort -u)
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo=sudo; else
      echo "$label: need root (or sudo) to install: ${need[*]}" >&2; return 1; fi
  fi
  echo "make: installing Debian packages for $what: ${need[*]} (apt-get, a minute or two) ..."
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  local svc
  for svc in "${services[@]}"; do
    if [ -d /run/systemd/system ]; then $sudo systemctl disable --now "$svc" >/dev/null 2>&1 || true; fi
  done
}
