#!/usr/bin/env bash
# Installs the Debian packages the real-component tests drive (tests/test_real_slurm.py, tests/test_real_podman.py):
# slurm-wlm (slurmctld, slurmd, sbatch ...) and munge for a one-node Slurm cluster, podman with runc (Debian's
# crun refuses hybrid cgroup hosts), and busybox-static (the static /bin/busybox the Podman test image is made of).
# Idempotent: does nothing when the commands are already present (a few ms).
set -euo pipefail
need=()
for cmd in slurmctld slurmd sbatch srun squeue sinfo scancel scontrol; do
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || { need+=(slurm-wlm); break; }
done
{ command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ]; } && command -v munge >/dev/null 2>&1 || need+=(munge)
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || need+=(runc)
command -v flock >/dev/null 2>&1 || need+=(util-linux)
# a dynamically linked /bin/busybox (Debian's busybox) does not run in an image without a libc
linked=$(LC_ALL=C ldd /bin/busybox 2>&1 || true)  # ldd exits 1 for a static executable
case "$linked" in *"not a dynamic executable"*|*"statically linked"*) ;; *) need+=(busybox-static) ;; esac
source "$(dirname "$0")/apt-install.sh"
apt_install install-real-debian "the real-component tests" slurmctld slurmd munge -- "${need[@]}"
