# Sourced by the build-*.sh scripts: a tool built into a versioned folder of the cache outside
# the repository, with a stamp file that says what was built there.

cache=${RECONSCOPE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reconscope}

# cached WHAT FOLDER WANT: the tool goes to $cache/FOLDER (out). When its stamp says WANT the
# build is skipped: it says that WHAT is cached, prints the folder and ends the script;
# otherwise it makes the folder and starts the build's clock.
cached() {
  out="$cache/$2"
  want=$3
  if [[ -f "$out/stamp" && "$(cat "$out/stamp")" == "$want" ]]; then
    echo "$1 is cached ($want)" >&2
    echo "$out"
    exit 0
  fi
  mkdir -p "$out"
  start=$(date +%s)
}

# built WHAT: writes the stamp, says how long WHAT took to build and prints the folder (the
# script's last line).
built() {
  echo "$want" > "$out/stamp"
  echo "$1 built in $(( $(date +%s) - start ))s" >&2
  echo "$out"
}
