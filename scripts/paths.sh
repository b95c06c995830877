# Path checks shared by the launchers. In DRY_RUN mode a missing input is a warning: the config still resolves.
require_file() {
  local path="$1" how="$2"
  if [[ -e "$path" ]]; then return 0; fi
  if [[ "${DRY_RUN:-0}" == "1" ]]; then
    echo "warning: $path does not exist yet (create it with: $how)" >&2
    return 0
  fi
  echo "error: $path not found. Create it with: $how" >&2
  exit 1
}
