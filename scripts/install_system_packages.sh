#!/usr/bin/env bash
# System packages the recipe needs: bubblewrap for the embedded code sandbox's strongest isolation tier, plus the
# util-linux/procps/coreutils tools it drives (setpriv, kill; ipcrm, rm, chmod for the per-run sweep). Idempotent: installs only what is missing, and only
# as root with apt-get; otherwise it says what to run. Never fails the setup: the sandbox falls back and says so.
set -euo pipefail

declare -A PACKAGE_OF=([bwrap]=bubblewrap [setpriv]=util-linux [kill]=procps [ipcrm]=util-linux [rm]=coreutils
                      [chmod]=coreutils)
missing=()
for tool in bwrap setpriv kill ipcrm rm chmod; do
  if ! PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH" command -v "$tool" >/dev/null 2>&1; then
    pkg="${PACKAGE_OF[$tool]}"
    [[ " ${missing[*]-} " == *" $pkg "* ]] || missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "[system-packages] ok: bubblewrap $(bwrap --version | awk '{print $2}'), setpriv, kill, ipcrm, rm and chmod present"
  exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "[system-packages] missing: ${missing[*]}; install them as root (Debian/Ubuntu:" \
       "apt-get install -y ${missing[*]}). Until then the sandbox uses a weaker isolation tier." >&2
  exit 0
fi
echo "[system-packages] installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "[system-packages] installed: ${missing[*]} (bubblewrap $(bwrap --version | awk '{print $2}'))"
