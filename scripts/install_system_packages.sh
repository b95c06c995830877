#!/usr/bin/env bash
# System packages the recipe needs: bubblewrap for the embedded code sandbox's strongest isolation tier, plus the
# util-linux/procps/coreutils tools it drives (setpriv, kill; ipcrm, rm, chmod for the per-run sweep), and jemalloc,
# which CPU runs preload so that the trainer and vLLM workers give freed memory back (configs/device/cpu.env).
# Debian/Ubuntu (apt-get) and openEuler / CentOS / RHEL-family images (dnf, else yum); the package is `bubblewrap`
# on both. Idempotent: installs only what is missing, and only as root; otherwise it says what to run. Never fails
# the setup (always exits 0): without bubblewrap the sandbox falls back to a weaker tier and says so in
# `retool-sandbox probe` and /health; without jemalloc CPU runs keep glibc's malloc, whose workers grow for hours.
set -uo pipefail

say() { echo "[system-packages] $*"; }
warn() { echo "[system-packages] $*" >&2; }

if command -v apt-get >/dev/null 2>&1; then
  manager=apt-get
  jemalloc=libjemalloc2
  declare -A PACKAGE_OF=([bwrap]=bubblewrap [setpriv]=util-linux [kill]=procps [ipcrm]=util-linux
                         [rm]=coreutils [chmod]=coreutils)
elif command -v dnf >/dev/null 2>&1 || command -v yum >/dev/null 2>&1; then
  manager=$(command -v dnf >/dev/null 2>&1 && echo dnf || echo yum)
  jemalloc=jemalloc
  # On RHEL-family systems /usr/bin/kill comes with util-linux.
  declare -A PACKAGE_OF=([bwrap]=bubblewrap [setpriv]=util-linux [kill]=util-linux [ipcrm]=util-linux
                         [rm]=coreutils [chmod]=coreutils)
else
  manager=""
  jemalloc=libjemalloc2
  declare -A PACKAGE_OF=([bwrap]=bubblewrap [setpriv]=util-linux [kill]=procps [ipcrm]=util-linux
                         [rm]=coreutils [chmod]=coreutils)
fi

missing=()
for tool in bwrap setpriv kill ipcrm rm chmod; do
  if ! PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH" command -v "$tool" >/dev/null 2>&1; then
    pkg="${PACKAGE_OF[$tool]}"
    [[ " ${missing[*]-} " == *" $pkg "* ]] || missing+=("$pkg")
  fi
done

# grep reads the whole list: with -q it would stop at the match, and under pipefail ldconfig's SIGPIPE on a long
# library list (a large container) would read as "missing".
if ! { ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | grep 'libjemalloc\.so\.2 ' >/dev/null; then
  missing+=("$jemalloc")
fi

bwrap_version() { bwrap --version 2>/dev/null | awk '{print $2}'; }

if [[ ${#missing[@]} -eq 0 ]]; then
  say "ok: bubblewrap $(bwrap_version), setpriv, kill, ipcrm, rm, chmod and jemalloc present"
  exit 0
fi
if [[ $(id -u) -ne 0 || -z "$manager" ]]; then
  warn "missing: ${missing[*]}; install them as root (Debian/Ubuntu: apt-get install -y ${missing[*]};" \
       "openEuler/CentOS/RHEL: dnf install -y ${missing[*]} or yum install -y ${missing[*]})." \
       "Until then the sandbox uses a weaker isolation tier, or CPU runs glibc's malloc."
  exit 0
fi

say "installing with $manager: ${missing[*]}"
case "$manager" in
  apt-get)
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null 2>&1 || warn "apt-get update failed; trying the package lists at hand"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    ;;
  *)
    "$manager" install -y -q "${missing[@]}" >/dev/null
    ;;
esac
status=$?
if [[ $status -ne 0 ]]; then
  warn "$manager could not install ${missing[*]} (exit $status): no repository that has them, or no network." \
       "Until they are installed the sandbox runs with a weaker isolation tier (see \`retool-sandbox probe\`)," \
       "or CPU runs with glibc's malloc."
  exit 0
fi
if ! PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH" command -v bwrap >/dev/null 2>&1; then
  warn "$manager reported success but bwrap is still not on PATH; see \`retool-sandbox probe\`."
  exit 0
fi
say "installed: ${missing[*]} (bubblewrap $(bwrap_version))"
exit 0
