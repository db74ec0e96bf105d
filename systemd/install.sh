#!/usr/bin/env bash
# Install headroom as a systemd service. Run as root:  sudo systemd/install.sh [SOURCE_DIR]
#
#   SOURCE_DIR  the checkout to install from (default: the repository this script lives in)
#
# Lays down:
#   /opt/headroom/venv                     a virtual environment with headroom installed (pip)
#   /opt/headroom/docs/                    the docs the unit's Documentation= points at
#   /etc/headroom/config.yaml              from SOURCE_DIR/config.yaml, only if absent
#   /etc/default/headroom                  from systemd/headroom.default, only if absent
#   /etc/systemd/system/headroom.service   always (local changes belong in drop-ins)
# creates the system user `headroom` (no home, nologin; added to the group owning /dev/nvidia* when
# those nodes are not world-accessible), then daemon-reload, enable and (re)start, unless systemd is
# not PID 1 (a container): then it says how to start the agent by hand. Safe to run again (upgrade).
#
# Environment:
#   ROOT=/some/dir                  lay every file under this prefix instead of /; creates no user and
#                                   touches no systemd (for tests and packaging); root not required
#   HEADROOM_INSTALL_SKIP_VENV=1    skip creating the venv and pip install (tests)
#   PYTHON=python3.11               the interpreter for the venv (>= 3.11; default python3)
#
# What it copies from the checkout it copies as regular files only: a symlink or anything else in
# the checkout (a doc symlinked to a secret) is refused, never followed, and a symlink anywhere in
# agent/ stops the install (setuptools would follow it into the venv), except the package's runbook
# (agent/headroom/docs/runbook.md), which must point at the checkout's docs/runbook.md. pip installs the dependencies at
# the versions pinned in systemd/requirements.txt, then the checkout with --no-deps; pip itself is
# not upgraded.
set -euo pipefail

say() { echo "install.sh: $*"; }
die() { echo "install.sh: error: $*" >&2; exit 1; }

# install_regular MODE SOURCE DEST: copy SOURCE only when it is a regular file and not a symlink.
install_regular() {
  local mode="$1" from="$2" to="$3"
  if [ -L "$from" ] || [ ! -f "$from" ]; then
    die "$from is not a regular file (a symlink or special file in the checkout is not installed)"
  fi
  install -m "$mode" "$from" "$to"
}

ROOT="${ROOT:-}"
ROOT="${ROOT%/}"
PYTHON="${PYTHON:-python3}"
script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "${1:-$script_dir/..}" 2>/dev/null && pwd)" || die "source directory ${1:-} does not exist"
[ -f "$src/pyproject.toml" ] || die "$src is not a headroom checkout (no pyproject.toml)"
[ -f "$src/systemd/headroom.service" ] || die "$src/systemd/headroom.service is missing"

if [ -z "$ROOT" ] && [ "$(id -u)" != 0 ]; then
  die "run as root (sudo $0), or set ROOT=DIR to lay the files under DIR"
fi

opt="$ROOT/opt/headroom"
etc="$ROOT/etc/headroom"

# setuptools follows a symlink in the package into the venv: the only one allowed is the package's runbook,
# agent/headroom/docs/runbook.md, and only to this checkout's docs/runbook.md (a regular file, its one source).
runbook_link="$src/agent/headroom/docs/runbook.md"
while IFS= read -r -d '' link; do
  if [ "$link" != "$runbook_link" ] || [ -L "$src/docs/runbook.md" ] || [ ! -f "$src/docs/runbook.md" ] \
     || [ "$(realpath -e "$link" 2>/dev/null)" != "$(realpath -e "$src/docs/runbook.md")" ]; then
    die "$link is a symlink: not installing a checkout with symlinks in the package"
  fi
done < <(find "$src/agent" "$src/pyproject.toml" -type l -print0)

# 1. Virtual environment with the project installed.
if [ "${HEADROOM_INSTALL_SKIP_VENV:-}" = 1 ]; then
  say "HEADROOM_INSTALL_SKIP_VENV=1: not creating $opt/venv"
else
  command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (set PYTHON=...)"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$PYTHON is $("$PYTHON" -V 2>&1); headroom needs Python >= 3.11 (set PYTHON=...)"
  install -d -m 0755 "$opt"
  if [ ! -x "$opt/venv/bin/python" ]; then
    say "creating $opt/venv"
    "$PYTHON" -m venv "$opt/venv" || die "python venv failed (Debian/Ubuntu: apt-get install python3-venv)"
  fi
  say "installing headroom from $src into $opt/venv"
  # Build from a scratch copy: pip builds in-tree, and a root-owned build/ in the checkout helps nobody.
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  tar -C "$src" --exclude=./.git --exclude=./.venv --exclude=./build --exclude='*.egg-info' -cf - . \
    | tar -C "$scratch" -xf -
  # Pinned: the dependencies at the versions in requirements.txt, then headroom itself without
  # resolving anything new; pip itself is left as the venv made it (no self-upgrade as root).
  install_regular 0644 "$src/systemd/requirements.txt" "$scratch/.requirements.txt"
  "$opt/venv/bin/python" -m pip install --quiet --no-deps -r "$scratch/.requirements.txt"
  "$opt/venv/bin/python" -m pip install --quiet --no-deps "$scratch"
fi
install -d -m 0755 "$opt/docs"
if [ -d "$src/docs" ]; then
  while IFS= read -r -d '' doc; do
    if [ -L "$doc" ] || [ ! -f "$doc" ]; then
      say "warning: not installing $doc: not a regular file (symlinks are not followed)"
      continue
    fi
    install -m 0644 "$doc" "$opt/docs/"
  done < <(find "$src/docs" -maxdepth 1 -name '*.md' -print0)
fi

# 2. The service user, and access to the NVIDIA device nodes.
if [ -n "$ROOT" ]; then
  say "ROOT set: not creating the headroom user"
else
  if ! getent passwd headroom >/dev/null; then
    nologin="$(command -v nologin || echo /usr/sbin/nologin)"
    if getent group headroom >/dev/null; then group_opt=(--gid headroom); else group_opt=(--user-group); fi
    useradd --system --no-create-home --home-dir /nonexistent --shell "$nologin" "${group_opt[@]}" headroom
    say "created system user headroom"
  fi
  declare -A groups_needed=()
  for node in /dev/nvidiactl /dev/nvidia[0-9]* /dev/nvidia-uvm /dev/nvidia-caps/*; do
    [ -c "$node" ] || continue
    group="$(stat -c %G "$node")"
    mode="$(stat -c %a "$node")"
    # World read-write (the driver's default 0666) needs nothing; otherwise join the owning group.
    if [ $(( 8#$mode & 6 )) -ne 6 ] && [ "$group" != root ]; then
      groups_needed["$group"]=1
    elif [ $(( 8#$mode & 6 )) -ne 6 ]; then
      say "warning: $node is $mode root:root; the headroom user cannot open it (see docs/reliability.md)"
    fi
  done
  for group in "${!groups_needed[@]}"; do
    usermod -a -G "$group" headroom
    say "added headroom to group $group (owner of NVIDIA device nodes)"
  done
fi

# 3. Configuration: never overwrite what the administrator has.
install -d -m 0755 "$etc" "$ROOT/etc/default"
if [ -e "$etc/config.yaml" ]; then
  say "kept existing $etc/config.yaml"
else
  install_regular 0644 "$src/config.yaml" "$etc/config.yaml"
  say "installed $etc/config.yaml"
fi
if [ -e "$ROOT/etc/default/headroom" ]; then
  say "kept existing $ROOT/etc/default/headroom"
else
  install_regular 0644 "$src/systemd/headroom.default" "$ROOT/etc/default/headroom"
  say "installed $ROOT/etc/default/headroom"
fi

# 4. The unit.
install -d -m 0755 "$ROOT/etc/systemd/system"
install_regular 0644 "$src/systemd/headroom.service" "$ROOT/etc/systemd/system/headroom.service"
say "installed $ROOT/etc/systemd/system/headroom.service"

# 5. Start it.
if [ -n "$ROOT" ]; then
  say "ROOT set: not touching systemd"
elif [ ! -d /run/systemd/system ]; then
  say "systemd is not running as PID 1 here (a container?): files are installed but nothing was started."
  say "start the agent by hand: /opt/headroom/venv/bin/headroom run --config.file /etc/headroom/config.yaml"
else
  systemctl daemon-reload
  systemctl enable headroom.service
  systemctl restart headroom.service  # starts it, or picks up an upgraded venv
  say "headroom is enabled and running: systemctl status headroom; journalctl -u headroom"
fi
